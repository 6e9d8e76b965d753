#include "server/stream/stream_session.h"
