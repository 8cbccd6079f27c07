#include "error.h"

#include <array>

namespace torch_tpu::pjrt {

std::string_view ErrorCodeName(PJRT_Error_Code code) {
  static constexpr std::array<std::string_view, 17> kNames = {
      "OK",       "CANCELLED",         "UNKNOWN",     "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS",   "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
      "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  auto index = static_cast<size_t>(code);
  return index < kNames.size() ? kNames[index] : "UNKNOWN_CODE";
}

std::string ConsumeError(const PJRT_Api* api, PJRT_Error* error, PJRT_Error_Code* code) {
  if (error == nullptr) return {};
  PJRT_Error_Message_Args message_args{};
  message_args.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message_args.error = error;
  api->PJRT_Error_Message(&message_args);
  std::string message(message_args.message, message_args.message_size);

  PJRT_Error_GetCode_Args code_args{};
  code_args.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code_args.error = error;
  PJRT_Error_Code error_code = PJRT_Error_Code_UNKNOWN;
  // GetCode itself reports failure through a PJRT_Error we could not describe; keep UNKNOWN then.
  if (api->PJRT_Error_GetCode(&code_args) == nullptr) error_code = code_args.code;

  PJRT_Error_Destroy_Args destroy_args{};
  destroy_args.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy_args.error = error;
  api->PJRT_Error_Destroy(&destroy_args);

  if (code != nullptr) *code = error_code;
  if (message.empty()) message = "(the plugin gave no message)";
  return std::string(ErrorCodeName(error_code)) + ": " + message;
}

void ThrowIfError(const PJRT_Api* api, PJRT_Error* error, std::string_view context) {
  if (error == nullptr) return;
  PJRT_Error_Code code = PJRT_Error_Code_UNKNOWN;
  std::string message = ConsumeError(api, error, &code);
  throw PjrtError(code, std::string(context) + ": " + message);
}

}  // namespace torch_tpu::pjrt
