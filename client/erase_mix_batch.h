// A received batch's RandomErasing and MixUp/CutMix parameters
// (BatchHeader.erased, BatchHeader.mix, which the daemon drew) in the form
// batchd_cuda applies them (client/cuda/erase_mix.h), checked against the
// batch's shape, and its float soft labels. What DeviceLoader runs for
// every batch of a plan with Pipeline.erasing or Pipeline.mix.
//
// Pure functions; thread-safe.
#ifndef BATCHD_CLIENT_ERASE_MIX_BATCH_H_
#define BATCHD_CLIENT_ERASE_MIX_BATCH_H_

#include <vector>

#include "absl/status/status.h"
#include "client/cuda/erase_mix.h"
#include "client/cuda/normalize.h"
#include "client/loader.h"

namespace batchd::client {

// `batch`'s erasing and mix for a batch normalised with `params`.
// INTERNAL (the daemon sent something no plan gives: a rectangle or box
// outside the image, a position beyond the batch, a lambda outside [0, 1])
// or INVALID_ARGUMENT (a uint8 output: erasing and mixing need floats).
absl::Status ToEraseMix(const BatchInfo& batch,
                        const cuda::NormalizeParams& params,
                        cuda::EraseMix* out);

// The batch's soft labels [n, num_classes] (empty without BatchHeader.mix).
// `plan` is the client's own plan: a header whose mix it did not ask for,
// or with other num_classes, is INTERNAL (so a daemon cannot make the
// client allocate more than the plan's batch_size x num_classes floats);
// INVALID_ARGUMENT for a label outside num_classes.
absl::Status SoftLabelsOf(const BatchInfo& batch, const cuda::MixParams& mix,
                          const batchd::v1::Plan& plan,
                          std::vector<float>* out);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_ERASE_MIX_BATCH_H_
