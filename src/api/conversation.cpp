#include "api/conversation.h"

namespace deepinfer::api {

Content text_content(std::string text) {
  Content content;
  content.push_back(ContentPart{ContentPart::Kind::Text, std::move(text)});
  return content;
}

std::string plain_text(const Content& content) {
  std::string text;
  for (const ContentPart& part : content) {
    if (part.kind == ContentPart::Kind::Text) text += part.text;
  }
  return text;
}

}  // namespace deepinfer::api
