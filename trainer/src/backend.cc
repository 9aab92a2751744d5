// MakeBackend: the one place that chooses between the CPU and the GPU backend.
#include "enclave/trainer/backend.h"

#include "cpu_backend.h"
#include "enclave/kernels/chunk_open.h"

#if defined(ENCLAVE_TRAIN_GPU)
#include "gpu_backend.h"
#endif

namespace enclave::trainer {

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

Result<std::unique_ptr<Backend>> MakeBackend(Device device) {
  if (device == Device::kCpu) return MakeCpuBackend();
#if defined(ENCLAVE_TRAIN_GPU)
  if (kernels::GpuAvailable()) {
    auto gpu = MakeGpuBackend();
    if (gpu.ok()) return std::move(gpu).value();
    if (device == Device::kGpu) return gpu.status();
  }
  if (device == Device::kGpu) return Unavailable("--device gpu: no usable CUDA GPU on this host");
#else
  if (device == Device::kGpu) return Unavailable("--device gpu: this build has no GPU backend (built without CUDA)");
#endif
  return MakeCpuBackend();
}

}  // namespace enclave::trainer
