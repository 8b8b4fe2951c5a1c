#pragma once
// A request the API refuses: carries what the HTTP server needs to build the OpenAI error object
// ({"error": {"message", "type", "param", "code"}}) and the status line. It is a deepinfer::Error,
// so code that only knows that type still reports the message; the server catches ApiError first.
#include <string>
#include <utility>

#include "core/error.h"

namespace deepinfer::api {

class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = {},
           std::string type = "invalid_request_error", std::string code = {})
      : Error(message), status_(status), message_(std::move(message)), param_(std::move(param)),
        type_(std::move(type)), code_(std::move(code)) {}

  int status() const { return status_; }
  // The whole message, NUL bytes included (what() stops at the first, e.g. in a model name).
  const std::string& message() const { return message_; }
  // Empty param / code mean JSON null in the error object.
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string message_;
  std::string param_;
  std::string type_;
  std::string code_;
};

// 400 invalid_request_error with `message` verbatim; `param` names the offending field.
[[noreturn]] inline void reject(std::string message, std::string param = {}) {
  throw ApiError(400, std::move(message), std::move(param));
}

}  // namespace deepinfer::api
