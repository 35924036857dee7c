/* cluster.c — named GPU and network profiles; every field can be overridden by
 * the cluster keys of a spec (sema.c fills the keys the user did not set).
 *
 * Units: memory in bytes, peaks in dense TFLOP/s, bandwidths in bytes/s per
 * direction.  Sources: REFERENCE.md "Collectives and links" and the vendors'
 * data sheets.  Memory capacities are what the marketing name means, read
 * conservatively: A100/H100/H800 "40GB"/"80GB" are 40/80 GiB (nvidia-smi reports
 * 40960 MiB and 81920 MiB; the driver keeps a little of that, which
 * cluster.runtime_reserve accounts for); H200 "141GB" is 141·10^9 bytes, less
 * than the 143 771 MiB nvidia-smi shows, so a plan that fits the profile fits
 * the card.  fp32 peaks are the non-tensor-core FMA rates (TF32 is not used for
 * fp32 training).  PCIe is the per-direction line rate: Gen4 x16 on A100 (32
 * GB/s), Gen5 x16 on Hopper (64 GB/s).
 */
#include "shardc.h"

#define GiB (1024.0 * 1024.0 * 1024.0)

/* Indexed by enum GpuProfile; the names are the cluster.gpu enum's values. */
const GpuInfo cluster_gpus[] = {
    [GPU_A100_40GB] = {"a100_40gb", (int64_t)(40 * GiB), 312, 19.5, 1555e9, 300e9, 32e9,
                       "NVIDIA A100 SXM 40GB: HBM2 1.555 TB/s, NVLink 3 300 GB/s per direction"},
    [GPU_A100_80GB] = {"a100_80gb", (int64_t)(80 * GiB), 312, 19.5, 2000e9, 300e9, 32e9,
                       "NVIDIA A100 SXM 80GB: HBM2e 2.0 TB/s, NVLink 3 300 GB/s per direction"},
    [GPU_H100_SXM_80GB] = {"h100_sxm_80gb", (int64_t)(80 * GiB), 989, 67, 3350e9, 450e9, 64e9,
                           "NVIDIA H100 SXM 80GB: HBM3 3.35 TB/s, NVLink 4 450 GB/s per direction"},
    [GPU_H200_141GB] = {"h200_141gb", 141000000000, 989, 67, 4800e9, 450e9, 64e9,
                        "NVIDIA H200 SXM 141GB (decimal): HBM3e 4.8 TB/s, NVLink 4 450 GB/s per direction"},
    [GPU_H800_80GB] = {"h800_80gb", (int64_t)(80 * GiB), 989, 67, 3350e9, 200e9, 64e9,
                       "NVIDIA H800 SXM 80GB: H100 compute, NVLink capped (about 200 GB/s per direction)"},
    [GPU_CPU] = {"cpu", (int64_t)(16 * GiB), 0.1, 0.1, 20e9, 10e9, 10e9,
                 "CPU backend, one rank per core group: 16 GiB budget per rank, memcpy-speed links"},
};
const int cluster_ngpus = (int)(sizeof cluster_gpus / sizeof cluster_gpus[0]);

/* Indexed by enum Network; bandwidth per GPU (each GPU has its own NIC). */
const NetInfo cluster_nets[] = {
    [NET_IB400] = {"ib400", 50e9, 5, "InfiniBand NDR, 400 Gb/s per GPU (H100/H200 nodes)"},
    [NET_IB200] = {"ib200", 25e9, 5, "InfiniBand HDR, 200 Gb/s per GPU (A100 nodes)"},
    [NET_ETH100] = {"eth100", 12.5e9, 20, "100 Gb/s Ethernet (RoCE or TCP)"},
    [NET_ETH400] = {"eth400", 50e9, 10, "400 Gb/s Ethernet (RoCE)"},
    [NET_NVLINK] = {"nvlink", 450e9, 2, "NVLink across nodes (NVLink Switch systems, e.g. NVL72)"},
};
const int cluster_nnets = (int)(sizeof cluster_nets / sizeof cluster_nets[0]);
