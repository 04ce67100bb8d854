// kernel-launch as SuperBench defines it: one empty kernel, <<<1, 1>>>, on the default stream.
//
// sb_kl_event_time: per launch, record a CUDA event, launch, record a second event, wait for it;
//   the sum of the device-side times between the two events (ms).
// sb_kl_wall_time: per launch, read the host's monotonic clock, launch, cudaDeviceSynchronize,
//   read the clock again; the sum of the host times (ms).
// Both run `warmups` untimed rounds first. The timed windows hold native calls only, so no
// interpreter time is in them. Built by sb_bench.micro.launch_native with nvcc into a shared
// library and called through ctypes; every function returns a cudaError_t (0: success).

#include <cuda_runtime.h>
#include <time.h>

__global__ void sb_empty_kernel() {}

static double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

extern "C" int sb_kl_set_device(int device) { return (int)cudaSetDevice(device); }

extern "C" const char *sb_kl_error_string(int code) { return cudaGetErrorString((cudaError_t)code); }

extern "C" int sb_kl_event_time(int warmups, int steps, double *total_ms) {
    cudaEvent_t start, stop;
    cudaError_t err = cudaEventCreate(&start);
    if (err != cudaSuccess) return (int)err;
    err = cudaEventCreate(&stop);
    if (err != cudaSuccess) {
        cudaEventDestroy(start);
        return (int)err;
    }
    double total = 0.0;
    for (int i = 0; i < warmups + steps && err == cudaSuccess; i++) {
        cudaEventRecord(start, 0);
        sb_empty_kernel<<<1, 1>>>();
        cudaEventRecord(stop, 0);
        err = cudaEventSynchronize(stop);
        float ms = 0.f;
        if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, start, stop);
        if (i >= warmups) total += ms;
    }
    if (err == cudaSuccess) err = cudaGetLastError();
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    *total_ms = total;
    return (int)err;
}

extern "C" int sb_kl_wall_time(int warmups, int steps, double *total_ms) {
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < warmups && err == cudaSuccess; i++) {
        sb_empty_kernel<<<1, 1>>>();
        err = cudaDeviceSynchronize();
    }
    double total = 0.0;
    for (int i = 0; i < steps && err == cudaSuccess; i++) {
        double t0 = now_ms();
        sb_empty_kernel<<<1, 1>>>();
        err = cudaDeviceSynchronize();
        total += now_ms() - t0;
    }
    if (err == cudaSuccess) err = cudaGetLastError();
    *total_ms = total;
    return (int)err;
}
