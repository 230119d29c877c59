// The oneDNN ISA cap as the probe reads it, and what it changes: the ISA the kernels may use, the recommended
// precision and its reason, and the report (the bf16 peak under a cap: peaks_test.cpp). The names' meaning was
// measured on LibTorch 2.13 (AMD EPYC family 25 model 17, AVX512_BF16): a 512x512 bf16 product took 0.65 ms
// uncapped, 3.6 ms at AVX512_CORE and 105-118 ms at AVX2 or avx2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bellows/hw/hardware_info.h"
#include "bellows/hw/report.h"
#include "test_util.h"

namespace bellows::hw {
namespace {

TEST(OnednnCap, NoneWhenNeitherVariableIsSet) { EXPECT_FALSE(onednn_isa_cap(nullptr, nullptr).has_value()); }

TEST(OnednnCap, LevelsAdmitWhatTheyName) {
  struct Case {
    const char* value;
    bool bf16, fp16, amx;
  };
  for (const Case& c : {Case{"SSE41", false, false, false}, Case{"AVX2", false, false, false}, Case{"AVX2_VNNI_2", false, false, false},
                        Case{"AVX512_CORE", false, false, false}, Case{"AVX512_CORE_VNNI", false, false, false},
                        Case{"AVX512_CORE_BF16", true, false, false}, Case{"AVX10_1_512", true, true, false},
                        Case{"AVX512_CORE_FP16", true, true, false}, Case{"AVX512_CORE_AMX", true, true, true},
                        Case{"AVX10_1_512_AMX_FP16", true, true, true}, Case{"ALL", true, true, true}, Case{"DEFAULT", true, true, true}}) {
    const auto cap = onednn_isa_cap(c.value, nullptr);
    ASSERT_TRUE(cap.has_value()) << c.value;
    EXPECT_TRUE(cap->recognised) << c.value;
    EXPECT_EQ(cap->variable, "ONEDNN_MAX_CPU_ISA");
    EXPECT_EQ(cap->value, c.value);
    EXPECT_EQ(cap->avx512_bf16, c.bf16) << c.value;
    EXPECT_EQ(cap->avx512_fp16, c.fp16) << c.value;
    EXPECT_EQ(cap->amx, c.amx) << c.value;
  }
}

TEST(OnednnCap, CaseDoesNotMatterAndOnednnsVariableWins) {
  const auto lower = onednn_isa_cap("avx2", nullptr);
  ASSERT_TRUE(lower.has_value());
  EXPECT_TRUE(lower->recognised);
  EXPECT_FALSE(lower->avx512_bf16);
  EXPECT_EQ(lower->value, "avx2");  // as set

  const auto both = onednn_isa_cap("ALL", "AVX2");
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->variable, "ONEDNN_MAX_CPU_ISA");
  EXPECT_TRUE(both->avx512_bf16);

  const auto old = onednn_isa_cap(nullptr, "AVX512_CORE");
  ASSERT_TRUE(old.has_value());
  EXPECT_EQ(old->variable, "DNNL_MAX_CPU_ISA");
  EXPECT_FALSE(old->avx512_bf16);
}

TEST(OnednnCap, AnUnknownNameSetsNoCap) {  // as oneDNN does: it ignores the variable
  const auto cap = onednn_isa_cap("AVX9000", nullptr);
  ASSERT_TRUE(cap.has_value());
  EXPECT_FALSE(cap->recognised);
  EXPECT_TRUE(cap->avx512_bf16 && cap->avx512_fp16 && cap->amx);
}

CpuInfo bf16_cpu(bool amx, const char* cap) {
  CpuInfo cpu;
  cpu.isa.avx2 = cpu.isa.avx512f = cpu.isa.avx512_bf16 = true;
  cpu.isa.amx_tile = cpu.isa.amx_bf16 = cpu.isa.amx_int8 = amx;
  cpu.onednn_cap = onednn_isa_cap(cap, nullptr);
  return cpu;
}

TEST(OnednnCap, KernelIsaDropsWhatTheCapKeepsOff) {
  const IsaFeatures uncapped = kernel_isa(bf16_cpu(true, nullptr));
  EXPECT_TRUE(uncapped.avx512_bf16 && uncapped.amx_bf16);
  const IsaFeatures no_amx = kernel_isa(bf16_cpu(true, "AVX512_CORE_BF16"));
  EXPECT_TRUE(no_amx.avx512_bf16);
  EXPECT_FALSE(no_amx.amx_bf16 || no_amx.amx_tile || no_amx.amx_int8);
  const IsaFeatures avx2 = kernel_isa(bf16_cpu(true, "AVX2"));
  EXPECT_FALSE(avx2.avx512_bf16 || avx2.amx_bf16);
  EXPECT_TRUE(avx2.avx512f);  // only the units that decide bf16, fp16 and AMX are tracked
}

TEST(OnednnCap, CappedBelowBf16TheCpuGetsFp32AndTheReasonNamesTheCap) {
  const precision::DeviceFacts facts = device_facts(bf16_cpu(false, "AVX2"));
  EXPECT_FALSE(facts.bf16);
  EXPECT_EQ(facts.no_bf16_why, "CPU has AVX512_BF16, but ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN's matmuls and convolutions off it");
  const Recommendation pick = recommend_precision(bf16_cpu(false, "AVX2"));
  EXPECT_EQ(pick.value, "fp32");
  EXPECT_NE(pick.reason.find("ONEDNN_MAX_CPU_ISA=AVX2"), std::string::npos) << pick.reason;

  const Recommendation unknown = recommend_precision(bf16_cpu(false, "AVX9000"));
  EXPECT_EQ(unknown.value, "bf16-mixed") << unknown.reason;
  const Recommendation no_amx = recommend_precision(bf16_cpu(true, "AVX512_CORE_BF16"));
  EXPECT_EQ(no_amx.value, "bf16-mixed");
  EXPECT_EQ(no_amx.reason.find("AMX"), std::string::npos) << no_amx.reason;
  EXPECT_NE(no_amx.reason.find("AVX512_BF16"), std::string::npos) << no_amx.reason;
}

TEST(OnednnCap, TheReportShowsIt) {
  HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  info.cpu.onednn_cap.reset();
  EXPECT_TRUE(nlohmann::json::parse(format_json(info))["cpu"]["onednn_cap"].is_null());
  EXPECT_EQ(format_text(info).find("oneDNN cap"), std::string::npos);

  info.cpu.isa.avx512_bf16 = true;
  info.cpu.isa.amx_bf16 = false;
  info.cpu.onednn_cap = onednn_isa_cap(nullptr, "avx2");
  const auto cap = nlohmann::json::parse(format_json(info))["cpu"]["onednn_cap"];
  EXPECT_EQ(cap["variable"], "DNNL_MAX_CPU_ISA");
  EXPECT_EQ(cap["value"], "avx2");
  EXPECT_EQ(cap["recognised"], true);
  EXPECT_EQ(cap["admits_avx512_bf16"], false);
  EXPECT_EQ(cap["admits_amx"], false);
  const std::string text = format_text(info);
  EXPECT_NE(text.find("oneDNN cap"), std::string::npos);
  EXPECT_NE(text.find("DNNL_MAX_CPU_ISA=avx2: keeps oneDNN's matmuls and convolutions off avx512_bf16"), std::string::npos) << text;

  info.cpu.onednn_cap = onednn_isa_cap("AVX9000", nullptr);
  EXPECT_NE(format_text(info).find("ONEDNN_MAX_CPU_ISA=AVX9000: not an ISA name oneDNN knows, so it sets no cap"), std::string::npos);
}

}  // namespace
}  // namespace bellows::hw
