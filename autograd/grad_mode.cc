#include "autograd/grad_mode.h"

namespace kiln::autograd {
namespace {
thread_local bool gradEnabled = true;
thread_local bool inferenceMode = false;
} // namespace

bool isGradEnabled() { return gradEnabled; }
void setGradEnabled(bool enabled) { gradEnabled = enabled; }
bool isInferenceMode() { return inferenceMode; }
void setInferenceMode(bool enabled) { inferenceMode = enabled; }

} // namespace kiln::autograd
