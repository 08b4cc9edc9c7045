// The serial model (no initialize, world size 1) behaves as idist's serial model, and
// misuse that needs no other process gets an actionable error.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <kindling/kindling.h>

namespace kd = kindling::dist;

#define EXPECT_THROW_MSG(stmt, type, fragment)                                        \
  do {                                                                                \
    try {                                                                             \
      stmt;                                                                           \
      ADD_FAILURE() << "expected " #type " from " #stmt;                              \
    } catch (const type& e) {                                                         \
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what(); \
    }                                                                                 \
  } while (0)

TEST(SerialModelTest, QueriesDescribeOneProcess) {
  EXPECT_EQ(kd::backend(), "serial");
  EXPECT_EQ(kd::model_name(), "serial");
  EXPECT_EQ(kd::get_rank(), 0);
  EXPECT_EQ(kd::get_local_rank(), 0);
  EXPECT_EQ(kd::get_world_size(), 1);
  EXPECT_EQ(kd::get_nproc_per_node(), 1);
  EXPECT_EQ(kd::get_nnodes(), 1);
  EXPECT_EQ(kd::get_node_rank(), 0);
  EXPECT_TRUE(kd::device().is_cpu());
  EXPECT_FALSE(kd::hostname().empty());
  EXPECT_FALSE(kd::is_initialized());
  auto backends = kd::available_backends();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front(), "serial");
  EXPECT_NE(std::find(backends.begin(), backends.end(), "gloo"), backends.end());
  const std::string config = kd::show_config();
  EXPECT_NE(config.find("distributed configuration: serial"), std::string::npos) << config;
  EXPECT_NE(config.find("world size: 1"), std::string::npos) << config;
}

TEST(SerialModelTest, CollectivesReturnTheirInput) {
  auto t = at::arange(4, at::kFloat);
  EXPECT_TRUE(kd::all_reduce(t).is_same(t));
  EXPECT_TRUE(kd::all_gather(t).is_same(t));
  EXPECT_TRUE(kd::broadcast(t, 0).is_same(t));
  EXPECT_EQ(kd::all_reduce(5), 5);
  EXPECT_EQ(kd::all_reduce(2.5, kd::ReduceOp::kMax), 2.5);
  EXPECT_EQ(kd::all_gather(7), std::vector<int>{7});
  EXPECT_EQ(kd::all_gather(std::string("abc")), std::vector<std::string>{"abc"});
  EXPECT_EQ(kd::broadcast(std::string("x"), 0), "x");
  EXPECT_EQ(kd::broadcast(std::optional<int>(3), 0), 3);
  auto objs = kd::all_gather_object(std::map<std::string, int>{{"a", 1}});
  ASSERT_EQ(objs.size(), 1u);
  EXPECT_EQ(objs[0].at("a"), 1);
  auto parts = kd::all_gather_tensors_with_shapes(t, {{4}});
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_TRUE(parts[0].is_same(t));
  auto g = kd::new_group({0});
  EXPECT_EQ(g.size(), 1);
  EXPECT_EQ(g.rank(), 0);
  EXPECT_TRUE(kd::all_reduce(t, kd::ReduceOp::kSum, g).is_same(t));
  kd::barrier();
  EXPECT_EQ(kd::gather(t, 0).size(), 1u);
  auto only = kd::one_rank_only([] { return 42; }, 0, true);
  EXPECT_EQ(only(), std::optional<int>(42));
  EXPECT_EQ(kd::one_rank_first([] { return 1; }), 1);
}

TEST(SerialModelTest, MisuseGivesActionableErrors) {
  EXPECT_THROW_MSG(kd::broadcast(std::optional<at::Tensor>(), 0), kindling::UsageError,
                   "source rank 0 passed no tensor");
  EXPECT_THROW_MSG(kd::broadcast(std::optional<int>(), 0), kindling::UsageError, "passed no value");
  // A non-source in the serial model gets no data: refused, not an empty optional read.
  // Every form agrees: with no value and another source, the serial model has nothing to return.
  EXPECT_THROW_MSG(kd::broadcast(std::optional<at::Tensor>(), 1), kindling::UsageError,
                   "rank 0 passed no tensor (std::nullopt) but runs in the serial model");
  EXPECT_THROW_MSG(kd::broadcast(std::optional<std::string>(), 1), kindling::UsageError,
                   "rank 0 passed std::nullopt but runs in the serial model");
  EXPECT_THROW_MSG(kd::broadcast_object(std::optional<std::vector<int>>(), 3), kindling::UsageError,
                   "broadcast returns its input (src=3)");
  EXPECT_THROW_MSG(kd::send(at::zeros({1}), 1), kindling::UsageError, "point-to-point needs a distributed backend");
  EXPECT_THROW_MSG(kd::new_group({0, 1}), kindling::UsageError, "ranks must be in [0, 1)");
  EXPECT_THROW_MSG(kd::new_group({}), kindling::UsageError, "the list of ranks is empty");
  EXPECT_THROW_MSG(kd::OneRankFirst guard(1), kindling::UsageError, "rank should be between 0 and 0, but given 1");
  EXPECT_THROW_MSG(kd::reduce_op_from_string("XOR"), kindling::UsageError, "unsupported reduction operation: 'XOR'");
  EXPECT_THROW_MSG(kd::all_reduce(at::ones({2}), kd::ReduceOp::kAnd), kindling::UsageError,
                   "needs an integral or bool tensor, got Float");
  EXPECT_THROW_MSG(kd::all_reduce(at::Tensor()), kindling::UsageError, "the tensor is undefined");
  EXPECT_THROW_MSG(kd::initialize("nccl2"), kindling::UsageError, "Available backends: serial");
  EXPECT_THROW_MSG(kd::decode<std::vector<int>>(kd::encode(std::string("text")), 1), kindling::UsageError,
                   "rank 1 sent a value of type 'string' but this rank expects 'vector<int32>'");
}

// initialize() checks kindling's variables for every backend: values, and names one or two
// letters from a kindling variable (a misspelling that would otherwise do nothing).
TEST(SerialModelTest, KindlingVariablesAreCheckedAtInitialize) {
  auto with = [](const char* name, const char* value, auto&& body) {
    ::setenv(name, value, 1);
    body();
    ::unsetenv(name);
  };
  with("KINDLING_STAL_TIMEOUT", "5", [] {
    ::testing::internal::CaptureStderr();
    kd::initialize("serial");
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("KINDLING_STAL_TIMEOUT is not a kindling variable and has no effect; did you mean "
                       "KINDLING_STALL_TIMEOUT?"),
              std::string::npos)
        << err;
  });
  with("KINDLING_MY_OWN_SETTING", "1", [] {
    ::testing::internal::CaptureStderr();
    kd::initialize("serial");
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(err.find("KINDLING_MY_OWN_SETTING"), std::string::npos) << "a program's own name is not a misspelling";
  });
  with("KINDLING_MPI_SHM_HEAP_MB", "-1", [] {
    EXPECT_THROW_MSG(kd::initialize("serial"), kindling::UsageError,
                     "KINDLING_MPI_SHM_HEAP_MB='-1' is not a whole number >= 0");
  });
  with("KINDLING_MPI_SHM_MIN_BYTES", "8k", [] {
    EXPECT_THROW_MSG(kd::initialize("serial"), kindling::UsageError, "KINDLING_MPI_SHM_MIN_BYTES='8k'");
  });
  with("KINDLING_DISTRIBUTED_DEBUG", "detail", [] {
    EXPECT_THROW_MSG(kd::initialize("serial"), kindling::UsageError, "is not one of OFF, INFO, DETAIL");
  });
}

TEST(SerialModelTest, SerializationRoundTripsNestedValues) {
  std::map<std::string, at::Tensor> m{{"a", at::arange(6, at::kInt).view({2, 3})}, {"b", at::ones({0})}};
  auto back = kd::decode<decltype(m)>(kd::encode(m));
  EXPECT_TRUE(at::equal(back.at("a"), m.at("a")));
  EXPECT_EQ(back.at("b").numel(), 0);
  std::vector<std::pair<int, std::string>> v{{1, "\xE2\x82\xAC"}, {2, ""}};
  EXPECT_EQ(kd::decode<decltype(v)>(kd::encode(v)), v);
  std::unordered_map<int64_t, double> um{{5, 0.5}};
  EXPECT_EQ((kd::decode<std::unordered_map<int64_t, double>>(kd::encode(um))), um);
}

// The tensor codec of the object collectives checks what a peer declares (dtype, sizes,
// length) against the message before allocating, so a corrupt or hostile message throws a
// kindling::UsageError instead of allocating what it claims.
TEST(SerialModelTest, TensorCodecRejectsCorruptMessagesBeforeAllocating) {
  using Codec = kd::Codec<at::Tensor>;
  const auto message = [](int8_t dtype, std::vector<int64_t> sizes, std::size_t payload) {
    kd::ByteWriter out;
    out.pod<int8_t>(dtype);
    out.pod<uint32_t>(static_cast<uint32_t>(sizes.size()));
    for (auto d : sizes) out.pod<int64_t>(d);
    out.write(std::string(payload, '\0').data(), payload);
    return out.bytes();
  };
  const auto decode = [](const std::string& bytes) {
    kd::ByteReader in(bytes);
    return Codec::decode(in);
  };
  const int8_t f32 = static_cast<int8_t>(at::kFloat);
  // Well-formed messages, including empty tensors with a huge other dimension.
  EXPECT_TRUE(at::equal(decode(message(f32, {2, 3}, 24)), at::zeros({2, 3})));
  EXPECT_EQ(decode(message(f32, {int64_t(1) << 40, 0}, 0)).numel(), 0);
  kd::ByteWriter round;
  Codec::encode(round, at::arange(6, at::kLong).view({3, 2}));
  EXPECT_TRUE(at::equal(decode(round.bytes()), at::arange(6, at::kLong).view({3, 2})));
  // A terabyte declared, 24 bytes sent.
  EXPECT_THROW_MSG(decode(message(f32, {int64_t(1) << 20, int64_t(1) << 20, 256}, 24)), kindling::UsageError,
                   "needs more data than the message holds (24 bytes left)");
  // Sizes whose product overflows 64 bits.
  EXPECT_THROW_MSG(decode(message(f32, {int64_t(1) << 62, int64_t(1) << 62, 4}, 24)), kindling::UsageError,
                   "needs more data than the message holds");
  EXPECT_THROW_MSG(decode(message(f32, {2, -3}, 24)), kindling::UsageError, "negative tensor size -3");
  EXPECT_THROW_MSG(decode(message(100, {2}, 8)), kindling::UsageError, "unknown tensor dtype code 100");
  EXPECT_THROW_MSG(decode(message(-1, {2}, 8)), kindling::UsageError, "unknown tensor dtype code -1");
  EXPECT_THROW_MSG(decode(message(f32, {3}, 8)), kindling::UsageError, "needs more data than the message holds");
}
