#include "api/sse_format.h"

namespace deepinfer::api {

std::string wire_text(const WireJson& payload) {
  return payload.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_data(const WireJson& payload) { return "data: " + wire_text(payload) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_event(std::string_view type, const WireJson& payload) {
  std::string frame = "event: ";
  frame += type;
  frame += "\ndata: ";
  frame += wire_text(payload);
  frame += "\n\n";
  return frame;
}

}  // namespace deepinfer::api
