#pragma once
/// The DLPack ABI (https://github.com/dmlc/dlpack, v0.8 structs plus v1.0's versioned tensor),
/// written out here so that kiln needs no extra dependency. Layouts must match the C header
/// exactly: these structs cross library boundaries inside "dltensor" PyCapsules.

#include <cstdint>

namespace kiln::dlpack {

/// DLDeviceType (a C enum, so 32 bits wide).
enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
};

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  /// In elements; null means compact row-major.
  int64_t *strides;
  uint64_t byte_offset;
};

/// The unversioned (v0.x) managed tensor carried by a "dltensor" capsule.
struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(DLManagedTensor *self);
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

/// The v1.x managed tensor carried by a "dltensor_versioned" capsule.
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
};

constexpr uint64_t kFlagReadOnly = 1ull << 0;

} // namespace kiln::dlpack
