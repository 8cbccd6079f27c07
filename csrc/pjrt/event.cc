#include "event.h"

#include <utility>

#include "error.h"

namespace torch_tpu::pjrt {

PjrtEvent::PjrtEvent(std::shared_ptr<const PjrtPlugin> plugin, PJRT_Event* event)
    : plugin_(std::move(plugin)), event_(event) {}

PjrtEvent::PjrtEvent(PjrtEvent&& other) noexcept
    : plugin_(std::move(other.plugin_)), event_(std::exchange(other.event_, nullptr)) {}

PjrtEvent& PjrtEvent::operator=(PjrtEvent&& other) noexcept {
  if (this != &other) {
    Reset();
    plugin_ = std::move(other.plugin_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

PjrtEvent::~PjrtEvent() { Reset(); }

void PjrtEvent::Reset() {
  if (event_ == nullptr) return;
  PJRT_Event_Destroy_Args args{};
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event_;
  // A failing destroy cannot be reported from a destructor; the message is dropped deliberately.
  ConsumeError(plugin_->api(), plugin_->api()->PJRT_Event_Destroy(&args));
  event_ = nullptr;
}

bool PjrtEvent::IsReady() const {
  if (event_ == nullptr) return true;
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = event_;
  ThrowIfError(plugin_->api(), plugin_->api()->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady");
  return args.is_ready;
}

void PjrtEvent::Await() const {
  if (event_ == nullptr) return;
  PJRT_Event_Await_Args args{};
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = event_;
  ThrowIfError(plugin_->api(), plugin_->api()->PJRT_Event_Await(&args), "device work failed");
}

namespace {
struct OnReadyState {
  const PJRT_Api* api;
  std::function<void(const std::string&)> callback;
};

void OnReadyTrampoline(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<OnReadyState> state(static_cast<OnReadyState*>(user_arg));
  state->callback(ConsumeError(state->api, error));
}
}  // namespace

void PjrtEvent::OnReady(std::function<void(const std::string& error)> callback) const {
  if (event_ == nullptr) {
    callback({});
    return;
  }
  auto state = std::make_unique<OnReadyState>(OnReadyState{plugin_->api(), std::move(callback)});
  PJRT_Event_OnReady_Args args{};
  args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  args.event = event_;
  args.callback = &OnReadyTrampoline;
  args.user_arg = state.get();
  ThrowIfError(plugin_->api(), plugin_->api()->PJRT_Event_OnReady(&args), "PJRT_Event_OnReady");
  state.release();  // owned by the trampoline from here on
}

}  // namespace torch_tpu::pjrt
