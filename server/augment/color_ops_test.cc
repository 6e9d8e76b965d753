#include "server/augment/color_ops.h"

#include "gtest/gtest.h"
