// RunPythonMirror: runs one of the GPU checkers' mirror modules (tools/device/<name>.py, plain Python) as a script
// and parses the JSON description it prints, for the CPU tests that compare a mirror with its C++ header
// (attention_params_mirror_test.cc, gdn_layout_mirror_test.cc). The build passes the source tree and the Python
// interpreter as DFLASH_SOURCE_DIR and DFLASH_PYTHON3. Thread-safety: call from one thread (popen).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace dflash::testing {

// The JSON the script prints; a null value (and a test failure saying why) when it cannot be run or parsed.
inline nlohmann::json RunPythonMirror(const std::string& script) {
  const std::string cmd = std::string("'") + DFLASH_PYTHON3 + "' '" + DFLASH_SOURCE_DIR + "/" + script + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return nullptr;
  }
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = pclose(pipe);
  if (status != 0) {
    ADD_FAILURE() << cmd << " exited with status " << status << ", output: " << out;
    return nullptr;
  }
  nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    ADD_FAILURE() << cmd << " printed no JSON: " << out;
    return nullptr;
  }
  return j;
}

}  // namespace dflash::testing
