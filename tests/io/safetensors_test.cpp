#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "io/safetensors_writer.h"

namespace deepinfer {
namespace {

using test::contains;
using test::raw_file;
using test::safetensors_file;
using test::tensor;

std::vector<std::byte> safetensors_view_bytes(const TensorView& view) { return {view.bytes.begin(), view.bytes.end()}; }

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string write(const std::vector<std::byte>& bytes, std::string_view name = "model.safetensors") {
    std::string path = dir_.file(name);
    test::write_file(path, bytes);
    return path;
  }

  // Opening `bytes` must fail with a message naming the file and every part given.
  void expect_error(const std::vector<std::byte>& bytes, std::initializer_list<std::string_view> parts) {
    const std::string path = write(bytes, "corrupt.safetensors");
    try {
      SafetensorsFile::open(path);
      ADD_FAILURE() << "corrupt file was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_TRUE(contains(message, path)) << "message does not name the file: " << message;
      for (auto part : parts) EXPECT_TRUE(contains(message, part)) << "missing \"" << part << "\" in: " << message;
    }
  }

  void expect_header_error(std::string_view header, std::size_t data_bytes,
                           std::initializer_list<std::string_view> parts) {
    expect_error(raw_file(header, data_bytes), parts);
  }

  test::TempDir dir_;
};

TEST_F(SafetensorsTest, ReadsEveryDtypeInHeaderOrder) {
  const std::vector<std::string> dtypes = {"F64", "F32",  "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0",
                                           "I64", "I32", "I16", "I8",   "U8",      "BOOL"};
  std::vector<test::TensorSpec> specs;
  // Names deliberately out of alphabetical order: listing must follow the header.
  for (std::size_t i = 0; i < dtypes.size(); ++i)
    specs.push_back(tensor(std::to_string(dtypes.size() - i) + ".weight_" + dtypes[i], dtypes[i], {2, 3}));
  const auto path = write(safetensors_file(specs));

  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.path(), path);
  ASSERT_EQ(file.tensors().size(), specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& spec = specs[i];
    EXPECT_EQ(file.tensors()[i].name, spec.name);
    const TensorInfo* info = file.find(spec.name);
    ASSERT_NE(info, nullptr) << spec.name;
    EXPECT_EQ(dtype_name(info->dtype), spec.dtype);
    EXPECT_EQ(info->shape, spec.shape);
    EXPECT_EQ(info->byte_size(), spec.data.size());
    const TensorView view = file.view(spec.name);
    EXPECT_EQ(dtype_name(view.dtype), spec.dtype);
    EXPECT_EQ(view.shape, spec.shape);
    EXPECT_EQ(safetensors_view_bytes(view), spec.data) << spec.name;
  }
}

TEST_F(SafetensorsTest, ViewsPointIntoTheMappingAndSurviveMoves) {
  test::TensorSpec weights{"w", "F32", {3}, test::bytes_of<float>({1.5f, -2.0f, 0.25f})};
  auto opened = SafetensorsFile::open(write(safetensors_file({weights})));
  const TensorView before = opened.view("w");
  SafetensorsFile moved = std::move(opened);
  const TensorView after = moved.view("w");
  EXPECT_EQ(before.bytes.data(), after.bytes.data());
  EXPECT_EQ(after.data<float>()[0], 1.5f);
  EXPECT_EQ(after.data<float>()[1], -2.0f);
  EXPECT_EQ(after.data<float>()[2], 0.25f);
}

TEST_F(SafetensorsTest, EmptyTensorsAndScalars) {
  const auto file = SafetensorsFile::open(write(safetensors_file({
      tensor("empty", "F32", {0}),
      tensor("scalar", "F32", {}),
      tensor("empty_middle", "BF16", {3, 0, 5}),
      tensor("after", "I32", {2}),
  })));
  EXPECT_EQ(file.view("empty").bytes.size(), 0u);
  EXPECT_EQ(file.view("empty").numel(), 0);
  const TensorView scalar = file.view("scalar");
  EXPECT_TRUE(scalar.shape.empty());
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(safetensors_view_bytes(scalar), tensor("scalar", "F32", {}).data);
  EXPECT_EQ(file.view("empty_middle").shape, (std::vector<int64_t>{3, 0, 5}));
  EXPECT_EQ(file.view("empty_middle").bytes.size(), 0u);
  EXPECT_EQ(safetensors_view_bytes(file.view("after")), tensor("after", "I32", {2}).data);
}

TEST_F(SafetensorsTest, PackedFp4IsValidatedByItsStoredShape) {
  // DeepSeek stores FP4 e2m1 weights [out=4, in=16] as I8 [4, 8]: two values per byte.
  const auto file = SafetensorsFile::open(write(safetensors_file({tensor("experts.w1", "I8", {4, 8})})));
  EXPECT_EQ(file.view("experts.w1").bytes.size(), 32u);
  EXPECT_EQ(file.find("experts.w1")->shape, (std::vector<int64_t>{4, 8}));
  // The logical shape with 32 bytes of data is a mismatch, not a special case.
  expect_header_error(R"({"experts.w1":{"dtype":"I8","shape":[4,16],"data_offsets":[0,32]}})", 32,
                      {"'experts.w1'", "32 bytes", "64 bytes"});
}

TEST_F(SafetensorsTest, Metadata) {
  const auto with = SafetensorsFile::open(
      write(safetensors_file({tensor("w", "F16", {2})}, {{"format", "pt"}, {"source", "test"}}), "with.safetensors"));
  EXPECT_EQ(with.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"source", "test"}}));
  EXPECT_EQ(with.tensors().size(), 1u);  // __metadata__ is not a tensor
  EXPECT_EQ(with.find("__metadata__"), nullptr);

  const auto without = SafetensorsFile::open(write(safetensors_file({tensor("w", "F16", {2})}), "without.safetensors"));
  EXPECT_TRUE(without.metadata().empty());
}

TEST_F(SafetensorsTest, AcceptsPaddingOffsetOrderDifferentFromHeaderOrderAndNoTensors) {
  // "b" comes first in the header but second in the data region.
  const std::string header =
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})"
      "                ";
  const auto bytes = raw_file(header, 6);
  const auto file = SafetensorsFile::parse(bytes, "in-memory");
  ASSERT_EQ(file.tensors().size(), 2u);
  EXPECT_EQ(file.tensors()[0].name, "b");
  EXPECT_EQ(file.view("a").bytes.data(), bytes.data() + 8 + header.size());
  EXPECT_EQ(file.view("b").bytes.data(), bytes.data() + 8 + header.size() + 4);

  const auto only_metadata = raw_file(R"({"__metadata__":{"k":"v"}})");
  EXPECT_TRUE(SafetensorsFile::parse(only_metadata, "in-memory").tensors().empty());
  EXPECT_TRUE(SafetensorsFile::parse(raw_file("{}"), "in-memory").tensors().empty());
}

TEST_F(SafetensorsTest, MissingTensorNamesFileAndTensor) {
  const auto path = write(safetensors_file({tensor("w", "F32", {1})}));
  const auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.find("v"), nullptr);
  try {
    file.view("layers.0.missing");
    ADD_FAILURE() << "view of an absent tensor succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
    EXPECT_TRUE(contains(e.what(), "'layers.0.missing'")) << e.what();
  }
}

TEST_F(SafetensorsTest, RejectsFilesThatCannotHoldAHeader) {
  expect_error({}, {"0 bytes", "8-byte"});
  expect_error(std::vector<std::byte>(7), {"7 bytes"});
  const auto directory = dir_.file("folder.safetensors");
  std::filesystem::create_directory(directory);
  try {
    SafetensorsFile::open(directory);
    ADD_FAILURE() << "a directory opened as a file";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), directory)) << e.what();
  }
  EXPECT_THROW(SafetensorsFile::open(dir_.file("absent.safetensors")), Error);
}

TEST_F(SafetensorsTest, RejectsBadHeaderLength) {
  const std::string header = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  expect_error(raw_file(header.size() + 2, header), {"header length", "truncated"});
  expect_error(raw_file(uint64_t{1} << 40, header), {"1099511627776", "limit"});
  expect_error(raw_file(~uint64_t{0}, header), {"18446744073709551615", "limit"});
}

TEST_F(SafetensorsTest, RejectsHeaderThatIsNotAJsonObject) {
  expect_header_error(R"({"w": {"dtype": "F32", )", 0, {"not valid JSON"});
  expect_header_error("\x7f\x01 garbage", 0, {"not valid JSON"});
  expect_header_error("{\"w\xff\": 1}", 0, {"not valid JSON"});  // not UTF-8
  // nlohmann reports a number beyond double range as out_of_range, not parse_error (found by fuzzing).
  expect_header_error(R"({"w":{"dtype":"U8","shape":[1e3028],"data_offsets":[0,1]}})", 1, {"not valid JSON", "1e3028"});
  expect_header_error(R"({"__metadata__":{"k":-1e999}})", 0, {"not valid JSON"});
  expect_header_error(R"([1, 2])", 0, {"array", "expected an object"});
  expect_header_error(R"("text")", 0, {"string", "expected an object"});
  expect_header_error(R"({"w": [1, 2]})", 0, {"'w'", "array", "expected an object"});
  expect_header_error(R"({"w": 5})", 0, {"'w'", "number"});
}

TEST_F(SafetensorsTest, RejectsMissingOrMistypedFields) {
  expect_header_error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "missing \"dtype\""});
  expect_header_error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"'w'", "missing \"shape\""});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[1]}})", 4, {"'w'", "missing \"data_offsets\""});
  expect_header_error(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "\"dtype\"", "number"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4, {"'w'", "\"shape\"", "number"});
  expect_header_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":"0-4"}})", 4,
                      {"'w'", "data_offsets", "string"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtypeByName) {
  expect_header_error(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1, {"'w'", "unknown dtype", "\"F4\""});
  expect_header_error(R"({"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}})", 4, {"'w'", "\"f32\""});
}

TEST_F(SafetensorsTest, RejectsBadShapeDims) {
  expect_header_error(R"({"w":{"dtype":"U8","shape":[2,-1],"data_offsets":[0,0]}})", 0, {"'w'", "shape[1]", "negative"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", 1, {"'w'", "shape[0]", "not an integer"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[1e30],"data_offsets":[0,1]}})", 1, {"'w'", "not an integer"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})", 2, {"'w'", "shape[0]", "string"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,1]}})", 1,
                      {"'w'", "int64"});
}

TEST_F(SafetensorsTest, RejectsElementAndByteCountOverflow) {
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", 1,
                      {"'w'", "overflows"});
  // 2^61 elements fit in int64, 2^61 * 8 bytes do not fit in 64 bits.
  expect_header_error(R"({"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,8]}})", 8,
                      {"'w'", "overflows"});
}

TEST_F(SafetensorsTest, RejectsBadDataOffsets) {
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4,8]}})", 4, {"'w'", "3 elements"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", 4, {"'w'", "1 elements"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})", 4, {"'w'", "data_offsets[0]", "negative"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4.0]}})", 4, {"'w'", "data_offsets[1]", "not an integer"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,null]}})", 4, {"'w'", "data_offsets[1]", "null"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4, {"'w'", "[4, 0]", "begin after end"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 3, {"'w'", "beyond", "3 bytes"});
  expect_header_error(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4, {"'w'", "beyond"});
}

TEST_F(SafetensorsTest, RejectsByteCountThatDoesNotMatchShape) {
  expect_header_error(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20,
                      {"'w'", "20 bytes", "24 bytes", "[2, 3]", "F32"});
}

TEST_F(SafetensorsTest, RejectsOverlapsGapsAndUnusedTail) {
  expect_header_error(
      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", 12,
      {"'a'", "'b'", "overlap"});
  // Overlap is found whatever the header order.
  expect_header_error(
      R"({"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", 12,
      {"'a'", "'b'", "overlap"});
  expect_header_error(
      R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[12,20]}})", 20,
      {"4 unused bytes", "'b'", "'a'"});
  expect_header_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})", 6, {"2 unused bytes", "'a'"});
  expect_header_error(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9, {"5 unused bytes", "'a'"});
  expect_header_error(R"({})", 3, {"3 unused bytes"});
}

TEST_F(SafetensorsTest, RejectsDuplicateNames) {
  expect_header_error(
      R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8,
      {"'w'", "twice"});
  expect_header_error(R"({"w":{"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]}})", 4,
                      {"'w'", "\"dtype\"", "twice"});
  expect_header_error(R"({"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}})", 0, {"__metadata__", "twice"});
  expect_header_error(R"({"__metadata__":{"a":"1","a":"2"}})", 0, {"__metadata__", "\"a\"", "twice"});
}

TEST_F(SafetensorsTest, RejectsNonStringMetadata) {
  expect_header_error(R"({"__metadata__":{"format":"pt","total":12}})", 0, {"__metadata__", "\"total\"", "number"});
  expect_header_error(R"({"__metadata__":{"nested":{"a":"b"}}})", 0, {"__metadata__", "\"nested\"", "object"});
  expect_header_error(R"({"__metadata__":["pt"]})", 0, {"__metadata__", "array"});
}

TEST_F(SafetensorsTest, ParseNamesItsOrigin) {
  try {
    SafetensorsFile::parse(raw_file(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1), "shard-7 (memory)");
    ADD_FAILURE() << "accepted an unknown dtype";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "shard-7 (memory)")) << e.what();
    EXPECT_TRUE(contains(e.what(), "\"Q4\"")) << e.what();
  }
}

// The fuzzer's seeds (tools/make_safetensors_corpus.py) are only useful if they parse.
TEST_F(SafetensorsTest, FuzzSeedCorpusIsValid) {
  const auto corpus = std::filesystem::path(DEEPINFER_TEST_DATA_DIR) / "../../fuzz/corpus/fuzz_safetensors";
  std::size_t seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(SafetensorsFile::open(entry.path().string()));
    ++seeds;
  }
  EXPECT_GE(seeds, 4u);
}

}  // namespace
}  // namespace deepinfer
