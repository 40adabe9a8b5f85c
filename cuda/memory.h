#pragma once
/// Makes `cuda` a device kiln tensors can live on: registers, for DeviceType::CUDA, the runtime's
/// DeviceMemory (allocation through Backend, copies, device-side casts and fills) and its device
/// op runner (eager ops as one-node graphs, eager.h). The frontend calls it once at import;
/// nothing touches CUDA until a tensor is put on it.

namespace kiln::cuda {

void installCudaTensors();

} // namespace kiln::cuda
