// The physical device a worker reports at registration (RegisterWorkerRequest.physical_device):
// which GPU it computes on, so that the coordinator can tell workers that share one GPU
// (coordinator/service/worker_topology.h) from workers on GPUs of their own, whatever
// CUDA_VISIBLE_DEVICES calls each process's GPU.
// Thread safety: every function may be called from any thread.
#ifndef DAPPLE_WORKER_DAEMON_PHYSICAL_DEVICE_H_
#define DAPPLE_WORKER_DAEMON_PHYSICAL_DEVICE_H_

#include <string>

namespace dapple::worker {

// A GPU's 16-byte UUID (cudaDeviceProp.uuid) as nvidia-smi -L prints it:
// "GPU-" then lower-case hex in groups of 8-4-4-4-12 digits.
std::string FormatGpuUuid(const unsigned char (&bytes)[16]);

// The physical device behind `device`: for "cuda:N" the GPU's UUID (FormatGpuUuid), "" when it
// cannot be read or the build has no CUDA; "" for "cpu" and anything else (a host's cores are
// counted by host_compute_capacity instead).
std::string PhysicalDevice(const std::string& device);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_PHYSICAL_DEVICE_H_
