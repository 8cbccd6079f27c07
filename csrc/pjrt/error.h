// Errors raised by the PJRT layer. Every PJRT_Error* returned by the plugin is converted into a
// PjrtError (and destroyed) at the call site, so no C error handle ever escapes this layer.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "pjrt_c_api.h"

namespace torch_tpu::pjrt {

class PjrtError : public std::runtime_error {
 public:
  PjrtError(PJRT_Error_Code code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  PJRT_Error_Code code() const { return code_; }

 private:
  PJRT_Error_Code code_;
};

std::string_view ErrorCodeName(PJRT_Error_Code code);

// Takes ownership of `error`. Returns normally when it is null; otherwise throws a PjrtError whose
// message is "<context>: <CODE>: <plugin message>".
void ThrowIfError(const PJRT_Api* api, PJRT_Error* error, std::string_view context);

// Like ThrowIfError, but returns the error as a message instead of throwing (for callbacks that
// must not throw across the C boundary). Returns an empty optional-like string for success.
std::string ConsumeError(const PJRT_Api* api, PJRT_Error* error, PJRT_Error_Code* code = nullptr);

}  // namespace torch_tpu::pjrt
