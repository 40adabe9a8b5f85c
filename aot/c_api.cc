// The C interface of aot/kiln_aot.h over AotModel: every exception becomes a status and this
// thread's last error, so no C++ exception crosses the library boundary.

#include "aot/kiln_aot.h"
#include "aot/model.h"
#include "runtime/error.h"

#include <cstdlib>
#include <new>
#include <string>

struct kiln_model {
  explicit kiln_model(std::unique_ptr<kiln::aot::AotModel> m) : model(std::move(m)) {}
  std::unique_ptr<kiln::aot::AotModel> model;
};

namespace {

thread_local std::string tLastError;

kiln_status fail(kiln_status status, std::string message) {
  tLastError = std::move(message);
  return status;
}

/// Runs `fn`, mapping exceptions to statuses.
template <typename Fn> kiln_status guarded(Fn &&fn) {
  try {
    fn();
    return KILN_OK;
  } catch (const kiln::aot::AotError &e) {
    return fail(e.status, e.what());
  } catch (const kiln::Error &e) {
    bool shape = e.kind() == kiln::ErrorKind::Value || e.kind() == kiln::ErrorKind::Index ||
                 e.kind() == kiln::ErrorKind::Shape;
    return fail(shape ? KILN_ERROR_SHAPE : KILN_ERROR_RUNTIME, e.what());
  } catch (const std::bad_alloc &) {
    return fail(KILN_ERROR_RUNTIME, "out of memory");
  } catch (const std::exception &e) {
    return fail(KILN_ERROR_RUNTIME, e.what());
  } catch (...) {
    return fail(KILN_ERROR_RUNTIME, "unknown error");
  }
}

} // namespace

extern "C" {

kiln_status kiln_model_create(const kiln_program_desc *desc, const char *weights_path,
                              kiln_model **model) {
  if (!desc || !model)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_model_create: null argument");
  *model = nullptr;
  return guarded(
      [&] { *model = new kiln_model(std::make_unique<kiln::aot::AotModel>(*desc, weights_path)); });
}

void kiln_model_destroy(kiln_model *model) { delete model; }

size_t kiln_model_num_inputs(const kiln_model *model) {
  return model ? model->model->graph().inputs.size() : 0;
}

size_t kiln_model_num_outputs(const kiln_model *model) {
  return model ? model->model->graph().outputs.size() : 0;
}

kiln_status kiln_model_input_info(const kiln_model *model, size_t index, kiln_io_info *info) {
  if (!model || !info)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_model_input_info: null argument");
  if (index >= model->model->graph().inputs.size())
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_model_input_info: index " + std::to_string(index) + " out of range");
  *info = model->model->inputInfo(index);
  return KILN_OK;
}

kiln_status kiln_model_output_info(const kiln_model *model, size_t index, kiln_io_info *info) {
  if (!model || !info)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_model_output_info: null argument");
  if (index >= model->model->graph().outputs.size())
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_model_output_info: index " + std::to_string(index) + " out of range");
  *info = model->model->outputInfo(index);
  return KILN_OK;
}

kiln_status kiln_model_run(kiln_model *model, const kiln_tensor *inputs, size_t num_inputs,
                           kiln_tensor *outputs, size_t num_outputs) {
  if (!model || (!inputs && num_inputs) || (!outputs && num_outputs))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_model_run: null argument");
  return guarded(
      [&] { model->model->run(std::span(inputs, num_inputs), std::span(outputs, num_outputs)); });
}

const char *kiln_last_error(void) { return tLastError.c_str(); }

void kiln_free(void *data) { std::free(data); }

const char *kiln_dtype_name(int32_t dtype) {
  static const char *const kNames[] = {"bool",  "uint8",   "int8",     "int16",   "int32",
                                       "int64", "float16", "bfloat16", "float32", "float64"};
  return dtype >= 0 && dtype < 10 ? kNames[dtype] : "unknown";
}

} // extern "C"
