#include "control/flavors.h"

#include <gtest/gtest.h>

namespace sovai::control {
namespace {

TEST(FlavorCatalogTest, DefaultHasTheReferenceNames) {
  const FlavorCatalog& c = FlavorCatalog::Default();
  for (const char* id : {"h100-1-gpu", "h200-1-gpu", "a100-1-gpu", "l40s-1-gpu", "l4-1-gpu",
                         "ai1-1-gpu", "ai1-1-cpu"}) {
    auto f = c.Find(id);
    ASSERT_TRUE(f.ok()) << id;
    EXPECT_EQ((*f)->id, id);
  }
  auto h100 = *c.Find("h100-1-gpu");
  EXPECT_EQ(h100->kind, FlavorKind::kGpu);
  EXPECT_EQ(h100->gpu_model, "H100");
  EXPECT_EQ(h100->max_units, 4);
  EXPECT_EQ(h100->price_micro_eur_per_minute, 46700);
  auto cpu = *c.Find("ai1-1-cpu");
  EXPECT_EQ(cpu->kind, FlavorKind::kCpu);
  EXPECT_EQ(cpu->gpus_per_unit, 0);
  EXPECT_EQ(cpu->memory_bytes_per_unit, uint64_t{4} << 30);
}

TEST(FlavorCatalogTest, UnknownFlavorNamesTheKnownOnes) {
  auto f = FlavorCatalog::Default().Find("h300-1-gpu");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), base::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("h300-1-gpu"), std::string::npos);
  EXPECT_NE(f.status().message().find("ai1-1-cpu"), std::string::npos);
}

TEST(FlavorCatalogTest, RejectsBadCatalogsNamingTheField) {
  struct Case {
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {"[]", "flavors"},
      {R"({"flavors": []})", "empty"},
      {R"({"flavors": [1]})", "flavors[0] must be an object"},
      {R"({"flavors": [{"kind": "cpu"}]})", "flavors[0]: missing required field 'id'"},
      {R"({"flavors": [{"id": "Big GPU", "kind": "gpu"}]})", "field 'id'"},
      {R"({"flavors": [{"id": "x", "kind": "tpu"}]})", "field 'kind'"},
      {R"({"flavors": [{"id": "x", "kind": "gpu", "gpus_per_unit": 1, "vcpus_per_unit": 1,
           "memory_gib_per_unit": 1, "max_units": 1, "price_per_minute_eur": "1"}]})",
       "field 'gpu_model' is required"},
      {R"({"flavors": [{"id": "x", "kind": "cpu", "gpu_model": "H100", "vcpus_per_unit": 1,
           "memory_gib_per_unit": 1, "max_units": 1, "price_per_minute_eur": "1"}]})",
       "field 'gpu_model' is only for gpu flavors"},
      {R"({"flavors": [{"id": "x", "kind": "cpu", "vcpus_per_unit": 0,
           "memory_gib_per_unit": 1, "max_units": 1, "price_per_minute_eur": "1"}]})",
       "field 'vcpus_per_unit' must be in [1, 4096], not 0"},
      {R"({"flavors": [{"id": "x", "kind": "cpu", "vcpus_per_unit": 1,
           "memory_gib_per_unit": 1, "price_per_minute_eur": "1"}]})",
       "field 'max_units' is required"},
      {R"({"flavors": [{"id": "x", "kind": "cpu", "vcpus_per_unit": 1,
           "memory_gib_per_unit": 1, "max_units": 1, "price_per_minute_eur": 0.5}]})",
       "price_per_minute_eur"},
      {R"({"flavors": [{"id": "x", "kind": "cpu", "vcpus_per_unit": 1,
           "memory_gib_per_unit": 1, "max_units": 1, "price_per_minute_eur": "-1"}]})",
       "field 'price_per_minute_eur' must be a non-negative decimal"},
      {R"({"flavors": [{"id": "x", "kind": "cpu", "vcpus_per_unit": 1, "memory_gib_per_unit": 1,
           "max_units": 1, "price_per_minute_eur": "1"},
          {"id": "x", "kind": "cpu", "vcpus_per_unit": 1, "memory_gib_per_unit": 1,
           "max_units": 1, "price_per_minute_eur": "1"}]})",
       "flavor 'x' appears twice"},
  };
  for (const Case& c : cases) {
    auto parsed = FlavorCatalog::Parse(c.json);
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_EQ(parsed.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.expect), std::string::npos)
        << parsed.status().message() << " should mention " << c.expect;
  }
}

TEST(FlavorCatalogTest, MicroEuros) {
  EXPECT_EQ(*ParseMicroEur("0"), 0);
  EXPECT_EQ(*ParseMicroEur("0.0467"), 46700);
  EXPECT_EQ(*ParseMicroEur("12.5"), 12500000);
  EXPECT_EQ(*ParseMicroEur("0.000001"), 1);
  for (const char* bad :
       {"", ".5", "1.", "1.0000001", "1e3", "-0.1", "0x10", "1,5", " 1", "1234567890"}) {
    EXPECT_FALSE(ParseMicroEur(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatMicroEur(46700), "0.0467");
  EXPECT_EQ(FormatMicroEur(12500000), "12.5");
  EXPECT_EQ(FormatMicroEur(3000000), "3");
  EXPECT_EQ(FormatMicroEur(1), "0.000001");
  EXPECT_EQ(FormatMicroEur(-1500000), "-1.5");
}

TEST(FlavorCatalogTest, RequestForUnits) {
  auto h100 = *FlavorCatalog::Default().Find("h100-1-gpu");
  auto two = RequestFor(*h100, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->gpus, 2);
  EXPECT_EQ(two->cpus, 60);
  EXPECT_EQ(two->memory_bytes, uint64_t{400} << 30);
  EXPECT_EQ(two->gpu_model, "H100");
  auto five = RequestFor(*h100, 5);
  ASSERT_FALSE(five.ok());
  EXPECT_NE(five.status().message().find("1 to 4"), std::string::npos);
  EXPECT_FALSE(RequestFor(*h100, 0).ok());
}

TEST(FlavorCatalogTest, GpuModelMatchesWholeWords) {
  EXPECT_TRUE(GpuMatchesModel("NVIDIA H100 80GB HBM3", "H100"));
  EXPECT_TRUE(GpuMatchesModel("NVIDIA H100 80GB HBM3", "h100"));
  EXPECT_TRUE(GpuMatchesModel("Tesla V100S-PCIE-32GB", "V100S"));
  EXPECT_FALSE(GpuMatchesModel("Tesla V100-SXM2-16GB", "V100S"));
  EXPECT_FALSE(GpuMatchesModel("NVIDIA L40S", "L4"));
  EXPECT_TRUE(GpuMatchesModel("NVIDIA L4", "L4"));
  EXPECT_FALSE(GpuMatchesModel("NVIDIA H200", ""));
}

}  // namespace
}  // namespace sovai::control
