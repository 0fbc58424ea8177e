// layers/linear.h — everything that used to live here, in one include: the
// parallel linears (parallel_linear.h), ReplicatedParam (replicated_param.h),
// a shard ↔ the global weight (param_io.h), the TP / SP activation
// collectives (tp_comm.h) and the host ↔ device tensor copies
// (core/kernels/tensor_io.h, still spelled layers::TensorFromHost etc.).
// New code includes the narrower header it needs.
#pragma once

#include "core/kernels/tensor_io.h"
#include "layers/parallel_linear.h"
#include "layers/param_io.h"
#include "layers/replicated_param.h"
#include "layers/tp_comm.h"

namespace gtp::layers {

// The tensor copies moved to core/kernels; existing callers name them here.
using kernels::CopyFromHostF32;
using kernels::DeviceToHost;
using kernels::HostToDevice;
using kernels::TensorFromHost;

}  // namespace gtp::layers
