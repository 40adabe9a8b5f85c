#pragma once
/// Grad mode: whether ops record autograd history, per thread (torch's semantics: a no_grad block
/// in one thread leaves others recording). Inference mode implies grad mode off.

namespace kiln::autograd {

bool isGradEnabled();
void setGradEnabled(bool enabled);
bool isInferenceMode();
void setInferenceMode(bool enabled);

/// Sets grad mode for a scope and restores the previous mode on exit.
class GradModeGuard {
public:
  explicit GradModeGuard(bool enabled) : previous_(isGradEnabled()) { setGradEnabled(enabled); }
  ~GradModeGuard() { setGradEnabled(previous_); }
  GradModeGuard(const GradModeGuard &) = delete;
  GradModeGuard &operator=(const GradModeGuard &) = delete;

private:
  bool previous_;
};

} // namespace kiln::autograd
