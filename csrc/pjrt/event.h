// PjrtEvent: owns a PJRT_Event (completion of a transfer or an execution).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "pjrt_c_api.h"
#include "plugin.h"

namespace torch_tpu::pjrt {

class PjrtEvent {
 public:
  PjrtEvent() = default;
  PjrtEvent(std::shared_ptr<const PjrtPlugin> plugin, PJRT_Event* event);
  PjrtEvent(PjrtEvent&& other) noexcept;
  PjrtEvent& operator=(PjrtEvent&& other) noexcept;
  PjrtEvent(const PjrtEvent&) = delete;
  PjrtEvent& operator=(const PjrtEvent&) = delete;
  ~PjrtEvent();

  bool valid() const { return event_ != nullptr; }
  bool IsReady() const;
  // Blocks until the event is ready; throws PjrtError if the work it tracks failed.
  void Await() const;
  // Calls `callback` once ready, with an empty string on success or the error message. The callback
  // runs on a plugin thread (or inline if already ready) and must not throw.
  void OnReady(std::function<void(const std::string& error)> callback) const;

 private:
  void Reset();
  std::shared_ptr<const PjrtPlugin> plugin_;
  PJRT_Event* event_ = nullptr;
};

}  // namespace torch_tpu::pjrt
