// DAPPLE_HOST_DEVICE marks the few pure integer functions that host code (kernels/cpu, compiled
// by the C++ compiler) and device code (kernels/cuda, compiled by nvcc) must compute
// identically: the hashes behind parameter initialisation and dropout masks. Such functions live
// in headers, written once, so the CPU and the GPU cannot drift apart.
#ifndef DAPPLE_KERNELS_CPU_HOST_DEVICE_H_
#define DAPPLE_KERNELS_CPU_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define DAPPLE_HOST_DEVICE __host__ __device__
#else
#define DAPPLE_HOST_DEVICE
#endif

#endif  // DAPPLE_KERNELS_CPU_HOST_DEVICE_H_
