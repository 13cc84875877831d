// The --partrain spec parser: tables of valid specs with the values they mean, invalid
// specs with the exact message a user sees, the canonical form, and overlays.
#include "layout/spec.h"

#include <gtest/gtest.h>

#include <string>

namespace partrain {
namespace {

struct Valid {
  const char* text;
  int tp, pp;
  std::optional<int> dp;
  int ep, cp, zero;
  std::optional<bool> sp;
  const char* sched;
  int v;
  std::optional<int> mb;
};

TEST(SpecTest, ValidSpecsMeanWhatTheySay) {
  const Valid cases[] = {
      {"", 1, 1, {}, 1, 1, 0, {}, "1f1b", 1, {}},
      {"tp4,pp2", 4, 2, {}, 1, 1, 0, {}, "1f1b", 1, {}},
      {"tp2,pp2,dp2,zero1,sched=interleaved:2,mb=8", 2, 2, 2, 1, 1, 1, {}, "interleaved", 2, 8},
      {"ep4,zero2", 1, 1, {}, 4, 1, 2, {}, "1f1b", 1, {}},
      {"tp8,nosp", 8, 1, {}, 1, 1, 0, false, "1f1b", 1, {}},
      {"sp,tp2", 2, 1, {}, 1, 1, 0, true, "1f1b", 1, {}},
      {" tp4 , pp2 ", 4, 2, {}, 1, 1, 0, {}, "1f1b", 1, {}},
      {"cp2,zero3,sched=gpipe", 1, 1, {}, 1, 2, 3, {}, "gpipe", 1, {}},
      {"zero0,sched=my_sched-v2:3", 1, 1, {}, 1, 1, 0, {}, "my_sched-v2", 3, {}},
      {"dp16", 1, 1, 16, 1, 1, 0, {}, "1f1b", 1, {}},
      {"sched=1f1b:1", 1, 1, {}, 1, 1, 0, {}, "1f1b", 1, {}},
  };
  for (const Valid& c : cases) {
    SCOPED_TRACE(c.text);
    Result<ParallelSpec> r = parse_spec(c.text);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->tp, c.tp);
    EXPECT_EQ(r->pp, c.pp);
    EXPECT_EQ(r->dp, c.dp);
    EXPECT_EQ(r->ep, c.ep);
    EXPECT_EQ(r->cp, c.cp);
    EXPECT_EQ(r->zero, c.zero);
    EXPECT_EQ(r->sp, c.sp);
    EXPECT_EQ(r->sched, c.sched);
    EXPECT_EQ(r->virtual_stages, c.v);
    EXPECT_EQ(r->mb, c.mb);
  }
}

TEST(SpecTest, InvalidSpecsNameTheItemAndTheFix) {
  const std::pair<const char*, const char*> cases[] = {
      {"tpx", "partrain: 'tpx' in --partrain: tp needs a positive whole number, e.g. tp4"},
      {"tp0", "partrain: 'tp0' in --partrain: tp needs a positive whole number, e.g. tp4"},
      {"tp-2", "partrain: 'tp-2' in --partrain: tp needs a positive whole number, e.g. tp4"},
      {"tp", "partrain: 'tp' in --partrain: tp needs a positive whole number, e.g. tp4"},
      {"tp4,pp0", "partrain: 'pp0' in --partrain: pp needs a positive whole number, e.g. pp2"},
      {"dp2.5", "partrain: 'dp2.5' in --partrain: dp needs a positive whole number, e.g. dp8"},
      {"ep=4", "partrain: 'ep=4' in --partrain: ep needs a positive whole number, e.g. ep4"},
      {"cp99999999999",
       "partrain: 'cp99999999999' in --partrain: cp needs a positive whole number, e.g. cp2"},
      {"tp4,tp2", "partrain: 'tp2' in --partrain: tp is given twice (also 'tp4'); keep one"},
      {"zero1,zero2",
       "partrain: 'zero2' in --partrain: zero is given twice (also 'zero1'); keep one"},
      {"zero4",
       "partrain: 'zero4' in --partrain: zero needs a ZeRO stage 0, 1, 2 or 3, e.g. zero1"},
      {"zero", "partrain: 'zero' in --partrain: zero needs a ZeRO stage 0, 1, 2 or 3, e.g. zero1"},
      {"sp,nosp", "partrain: 'nosp' in --partrain: conflicts with 'sp'; keep one of sp or nosp"},
      {"sp,sp", "partrain: 'sp' in --partrain: sp is given twice (also 'sp'); keep one"},
      {"sched=interleaved:0",
       "partrain: 'sched=interleaved:0' in --partrain: the virtual-stage count V in "
       "sched=NAME:V needs a positive whole number, e.g. sched=interleaved:2"},
      {"sched=interleaved:",
       "partrain: 'sched=interleaved:' in --partrain: the virtual-stage count V in "
       "sched=NAME:V needs a positive whole number, e.g. sched=interleaved:2"},
      {"sched=interleaved",
       "partrain: 'sched=interleaved' in --partrain: interleaved needs a virtual-stage count, "
       "e.g. sched=interleaved:2"},
      {"sched=",
       "partrain: 'sched=' in --partrain: sched needs a schedule name (letters, digits, '_', "
       "'-', '.'), e.g. sched=1f1b, sched=gpipe or sched=interleaved:2"},
      {"sched=gpipe:2",
       "partrain: 'sched=gpipe:2' in --partrain: gpipe takes no virtual-stage count; write "
       "sched=gpipe, or sched=interleaved:2 for virtual stages"},
      {"sched=1f1b,sched=gpipe",
       "partrain: 'sched=gpipe' in --partrain: sched is given twice (also 'sched=1f1b'); keep "
       "one"},
      {"mb=0", "partrain: 'mb=0' in --partrain: mb needs a positive whole number of "
               "micro-batches, e.g. mb=8"},
      {"mb=", "partrain: 'mb=' in --partrain: mb needs a positive whole number of "
              "micro-batches, e.g. mb=8"},
      {"cpimpl=",
       "partrain: 'cpimpl=' in --partrain: cpimpl needs a context-parallel plugin's name "
       "(letters, digits, '_', '-', '.'), e.g. cpimpl=ring or cpimpl=allgather"},
      {"cpimpl=all gather",
       "partrain: 'cpimpl=all gather' in --partrain: separate items with commas, e.g. tp4,pp2"},
      {"cpimpl=a/b",
       "partrain: 'cpimpl=a/b' in --partrain: cpimpl needs a context-parallel plugin's name "
       "(letters, digits, '_', '-', '.'), e.g. cpimpl=ring or cpimpl=allgather"},
      {"cp2,cpimpl=ring,cpimpl=allgather",
       "partrain: 'cpimpl=allgather' in --partrain: cpimpl is given twice (also 'cpimpl=ring'); "
       "keep one"},
      {"grad=",
       "partrain: 'grad=' in --partrain: grad needs a data plugin's name (letters, digits, '_', "
       "'-', '.'), e.g. grad=onebit or grad=powersgd"},
      {"dp2,grad=onebit,grad=dp",
       "partrain: 'grad=dp' in --partrain: grad is given twice (also 'grad=onebit'); keep one"},
      {"tp4 pp2",
       "partrain: 'tp4 pp2' in --partrain: separate items with commas, e.g. tp4,pp2"},
      {"tp4,,pp2", "partrain: empty item in --partrain 'tp4,,pp2': remove the extra comma"},
      {"tp4,", "partrain: empty item in --partrain 'tp4,': remove the extra comma"},
      {"TP4", "partrain: 'TP4' in --partrain: unknown item; use tpN, ppN, dpN, epN, cpN, "
              "zero0..zero3, sp, nosp, sched=NAME[:V], cpimpl=NAME, grad=NAME or mb=M, e.g. --partrain=tp4,pp2"},
      {"foo", "partrain: 'foo' in --partrain: unknown item; use tpN, ppN, dpN, epN, cpN, "
              "zero0..zero3, sp, nosp, sched=NAME[:V], cpimpl=NAME, grad=NAME or mb=M, e.g. --partrain=tp4,pp2"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    Result<ParallelSpec> r = parse_spec(text);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), message);
  }
}

// cpimpl= names the context-parallel plugin: ring unless given; it is not the cp degree,
// though both start with "cp"; the canonical form carries it only when it is not ring.
TEST(SpecTest, ContextPluginIsItsOwnItem) {
  EXPECT_EQ(parse_spec("cp4")->cp_impl, "ring");
  Result<ParallelSpec> r = parse_spec("cp4,cpimpl=allgather");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->cp, 4);
  EXPECT_EQ(r->cp_impl, "allgather");
  EXPECT_EQ(r->to_string(), "tp1,pp1,cp4,zero0,sched=1f1b,cpimpl=allgather");
  EXPECT_EQ(parse_spec(r->to_string())->cp_impl, "allgather");
  EXPECT_EQ(parse_spec("cpimpl=ring,cp2")->to_string(), "tp1,pp1,cp2,zero0,sched=1f1b");
  EXPECT_EQ(parse_spec("cp2,cpimpl=my_ulysses-2")->cp_impl, "my_ulysses-2");
  // An overlay replaces it like any item.
  EXPECT_EQ(overlay_spec(*r, "cpimpl=ring")->cp_impl, "ring");
  EXPECT_EQ(overlay_spec(*r, "tp2")->cp_impl, "allgather");
}

TEST(SpecTest, SequenceParallelDefaultsToOnWhenTpIsAboveOne) {
  EXPECT_FALSE(parse_spec("pp2")->sequence_parallel());
  EXPECT_TRUE(parse_spec("tp2")->sequence_parallel());
  EXPECT_FALSE(parse_spec("tp2,nosp")->sequence_parallel());
  EXPECT_TRUE(parse_spec("sp")->sequence_parallel());
}

TEST(SpecTest, CanonicalFormIsExactAndParsesBack) {
  EXPECT_EQ(parse_spec("pp2,tp4")->to_string(), "tp4,pp2,zero0,sched=1f1b");
  EXPECT_EQ(parse_spec("tp4,pp2,dp8,zero1,sp")->to_string(), "tp4,pp2,dp8,zero1,sp,sched=1f1b");
  EXPECT_EQ(parse_spec("mb=8,sched=interleaved:2,ep2,cp2,nosp")->to_string(),
            "tp1,pp1,ep2,cp2,zero0,nosp,sched=interleaved:2,mb=8");
  const char* specs[] = {"", "tp4,pp2", "tp2,pp2,dp2,zero1,sched=interleaved:2,mb=8",
                         "ep4,zero2,nosp", "cp2,sched=myplugin:3", "sched=interleaved:1"};
  for (const char* text : specs) {
    SCOPED_TRACE(text);
    ParallelSpec a = *parse_spec(text);
    Result<ParallelSpec> b = parse_spec(a.to_string());
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    EXPECT_EQ(b->to_string(), a.to_string());
    EXPECT_EQ(b->tp, a.tp);
    EXPECT_EQ(b->dp, a.dp);
    EXPECT_EQ(b->sp, a.sp);
    EXPECT_EQ(b->sched, a.sched);
    EXPECT_EQ(b->virtual_stages, a.virtual_stages);
    EXPECT_EQ(b->mb, a.mb);
  }
}

TEST(SpecTest, OverlayReplacesOnlyTheItemsGiven) {
  ParallelSpec base = *parse_spec("tp4,pp2,zero1,sched=interleaved:2,mb=8,nosp");
  Result<ParallelSpec> r = overlay_spec(base, "pp4,sp,sched=gpipe");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tp, 4);
  EXPECT_EQ(r->pp, 4);
  EXPECT_EQ(r->zero, 1);
  EXPECT_EQ(r->sp, true);
  EXPECT_EQ(r->sched, "gpipe");
  EXPECT_EQ(r->virtual_stages, 1);  // sched= replaces the name and V together
  EXPECT_EQ(r->mb, 8);
  // Overriding the base is fine; repeating an item inside one overlay is not.
  EXPECT_EQ(overlay_spec(base, "tp2,tp8").status().message(),
            "partrain: 'tp8' in --partrain: tp is given twice (also 'tp2'); keep one");
  EXPECT_EQ(overlay_spec(base, "")->to_string(), base.to_string());
}

// grad= names the data plugin that averages the gradients in place of dp (zero0): empty
// unless given, carried by the canonical form only when given, replaced by an overlay.
TEST(SpecTest, GradientPluginIsItsOwnItem) {
  EXPECT_EQ(parse_spec("dp2")->grad, "");
  Result<ParallelSpec> r = parse_spec("dp4,grad=onebit");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->dp, 4);
  EXPECT_EQ(r->grad, "onebit");
  EXPECT_EQ(r->to_string(), "tp1,pp1,dp4,zero0,sched=1f1b,grad=onebit");
  EXPECT_EQ(parse_spec(r->to_string())->grad, "onebit");
  EXPECT_EQ(overlay_spec(*r, "grad=powersgd")->grad, "powersgd");
  EXPECT_EQ(overlay_spec(*r, "tp2")->grad, "onebit");
}

}  // namespace
}  // namespace partrain
