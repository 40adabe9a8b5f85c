/* kiln_aot.h: the C interface of models compiled ahead of time by kilnc.
 *
 * kilnc writes, for a model NAME, `libNAME.so` and `NAME.h`; NAME.h includes this file and
 * declares `NAME_create`. Everything else is generic over models: query the inputs and outputs,
 * run, destroy. Every call returns a kiln_status; on an error, kiln_last_error() holds the
 * message (per thread) until the next failing call on that thread. No call aborts the process
 * on bad input: wrong dtypes, ranks and sizes are checked natively against the exported specs.
 *
 * Tensors are dense row-major (C-contiguous) arrays described by kiln_tensor. `kiln_model_run`
 * may be called concurrently from several threads on one model.
 */
#ifndef KILN_AOT_H
#define KILN_AOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_AOT_ABI_VERSION 1
#define KILN_MAX_RANK 8

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, an index out of range, a bad count */
  KILN_ERROR_DTYPE = 2,            /* an input of the wrong dtype */
  KILN_ERROR_SHAPE = 3,            /* a wrong rank, a size that breaks the exported shapes/ranges */
  KILN_ERROR_WEIGHTS = 4,          /* the weights file is missing, corrupt or does not match */
  KILN_ERROR_INCOMPATIBLE = 5,     /* built for another CPU or runtime, or no CUDA device */
  KILN_ERROR_RUNTIME = 6           /* anything else (out of memory, an internal error) */
} kiln_status;

typedef enum kiln_dtype {
  KILN_BOOL = 0,
  KILN_UINT8 = 1,
  KILN_INT8 = 2,
  KILN_INT16 = 3,
  KILN_INT32 = 4,
  KILN_INT64 = 5,
  KILN_FLOAT16 = 6,
  KILN_BFLOAT16 = 7,
  KILN_FLOAT32 = 8,
  KILN_FLOAT64 = 9
} kiln_dtype;

/* A dense tensor. For inputs, `data` points at the caller's array. For outputs, a non-null
 * `data` is a caller buffer of exactly the output's dtype and sizes (checked); a null `data`
 * asks run() to allocate the output: it fills dtype, rank and sizes, and the caller releases
 * `data` with kiln_free(). Python numbers (int/float/bool inputs and outputs) are rank-0
 * tensors of int64/float64/bool. */
typedef struct kiln_tensor {
  void *data;
  int32_t dtype; /* kiln_dtype */
  int32_t rank;
  int64_t sizes[KILN_MAX_RANK];
} kiln_tensor;

/* An input or output as exported: a dim of sizes[] is -1 where it is symbolic, and dims[d]
 * then names it ("batch", "batch*2"); dims[d] is NULL for constant dims. `min`/`max` give the
 * range of a dim that is exactly a symbol with a range (max = -1: unbounded), else 0/-1. The
 * strings live as long as the model. */
typedef struct kiln_io_info {
  const char *name;
  int32_t dtype;
  int32_t rank;
  int64_t sizes[KILN_MAX_RANK];
  const char *dims[KILN_MAX_RANK];
  int64_t min[KILN_MAX_RANK];
  int64_t max[KILN_MAX_RANK];
} kiln_io_info;

typedef struct kiln_model kiln_model;

/* What kilnc links into libNAME.so to describe the model (not for direct use). */
typedef void (*kiln_kernel_fn)(void **args, int64_t begin, int64_t end);
typedef struct kiln_program_desc {
  uint32_t abi_version;     /* KILN_AOT_ABI_VERSION */
  const char *name;         /* NAME */
  const char *kiln_version; /* the kiln that compiled it: the runtime must be the same */
  const char *kir;          /* the exported .kir text */
  size_t kir_size;
  const char *options;          /* pipeline options: "fuse=1" */
  const char *features;         /* LLVM CPU features the kernels were compiled for */
  uint64_t module_hash;         /* FNV-1a of the emitted kernel module: the runtime re-derives it */
  const unsigned char *weights; /* embedded safetensors bytes, or NULL */
  size_t weights_size;
  const char *weights_file; /* default weights file name next to the library, or NULL */
  size_t num_kernels;
  const char *const *kernel_names;
  const kiln_kernel_fn *kernels;
  const char *target;            /* "cpu" or "cuda" */
  int32_t cuda_arch;             /* sm_XY of the embedded cubin (cuda) */
  const unsigned char *cuda_ptx; /* NVRTC's PTX, NUL-terminated (cuda) */
  size_t cuda_ptx_size;
  const unsigned char *cuda_cubin; /* SASS for cuda_arch, or NULL (cuda) */
  size_t cuda_cubin_size;
} kiln_program_desc;

/* Creates a model: `weights_path` is the safetensors file (NULL: embedded weights, else the
 * file kilnc wrote next to the library). */
kiln_status kiln_model_create(const kiln_program_desc *desc, const char *weights_path,
                              kiln_model **model);
void kiln_model_destroy(kiln_model *model);

size_t kiln_model_num_inputs(const kiln_model *model);
size_t kiln_model_num_outputs(const kiln_model *model);
kiln_status kiln_model_input_info(const kiln_model *model, size_t index, kiln_io_info *info);
kiln_status kiln_model_output_info(const kiln_model *model, size_t index, kiln_io_info *info);

/* Runs the model on `num_inputs` inputs (in order) into `num_outputs` outputs. */
kiln_status kiln_model_run(kiln_model *model, const kiln_tensor *inputs, size_t num_inputs,
                           kiln_tensor *outputs, size_t num_outputs);

/* The message of this thread's last failing call ("" if none). */
const char *kiln_last_error(void);
/* Releases an output that run() allocated. */
void kiln_free(void *data);
const char *kiln_dtype_name(int32_t dtype);

#ifdef __cplusplus
}
#endif

#endif /* KILN_AOT_H */
