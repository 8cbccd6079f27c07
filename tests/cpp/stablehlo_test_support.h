// Helpers shared by the StableHLO builder's unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "stablehlo/element_type.h"

namespace torch_tpu::stablehlo {

// Runs `fn` and returns the BuilderError message it throws (failing the test if none).
template <typename Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const BuilderError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a BuilderError";
  return "";
}

}  // namespace torch_tpu::stablehlo
