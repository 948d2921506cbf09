// attention_fusion: the rewrite asserted on the graphs PyTorch's exporter writes for kiln's three
// attention models (exported here with models/export_models.py), the reporting of unfused sites,
// and the models run with the pass on and off (which needs the kiln::Attention plugin).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <unistd.h>

#include "builder/plan/build_plan.h"
#include "builder/onnx/onnx_importer.h"
#include "onnx_model_builder.h"
#include "runtime/execution_context.h"
#include "runtime/npy_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::OnnxModelBuilder;

fs::path work_dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("kiln_attention_fusion_" + std::to_string(getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// Exports the small model (and its reference cases) once per test run; empty path on failure.
std::string export_small(const std::string& model) {
  static std::map<std::string, std::string> done;
  if (done.count(model)) return done[model];
  const fs::path out = work_dir() / (model + ".onnx");
  const fs::path ref = work_dir() / ("ref_" + model);
  const std::string cmd = std::string("cd '") + KILN_SOURCE_DIR + "' && /usr/bin/python3 models/export_models.py " + model +
                          " --size small --quiet --out '" + out.string() + "' --reference-dir '" + ref.string() +
                          "' > '" + (work_dir() / (model + ".log")).string() + "' 2>&1";
  done[model] = std::system(cmd.c_str()) == 0 ? out.string() : "";
  return done[model];
}

#define IMPORT_SMALL(var, model)                                                              \
  const std::string var##_path = export_small(model);                                          \
  ASSERT_FALSE(var##_path.empty()) << "export of " << model << " failed, see " << work_dir();   \
  auto var = import_onnx_file(var##_path);                                                     \
  ASSERT_TRUE(var.ok()) << var.status().message()

int count(const Graph& g, const std::string& op, const std::string& domain = "") {
  int n = 0;
  for (const auto& node : g.nodes)
    if (!node.removed && node.op_type == op && node.domain == domain) ++n;
  return n;
}

std::vector<const Node*> attention_nodes(const Graph& g) {
  std::vector<const Node*> r;
  for (const auto& n : g.nodes)
    if (!n.removed && n.domain == "kiln" && n.op_type == "Attention") r.push_back(&n);
  return r;
}

std::string in_name(const Graph& g, const Node& n, size_t i) {
  return i < n.inputs.size() && n.inputs[i] >= 0 ? g.values[n.inputs[i]].name : "<absent>";
}
std::string out_name(const Graph& g, const Node& n, size_t i) {
  return i < n.outputs.size() ? g.values[n.outputs[i]].name : "<none>";
}

std::string input_of(const Graph& g, const std::string& node, size_t i) {
  for (const auto& n : g.nodes)
    if (n.name == node) return g.values[n.inputs[i]].name;
  return "<no node " + node + ">";
}

void expect_attrs(const Node& n, int64_t heads, int64_t head_dim, const std::string& layout, const std::string& mask,
                  int64_t kv_cache) {
  EXPECT_EQ(n.attrs.at("num_heads").i, heads) << n.name;
  EXPECT_NEAR(n.attrs.at("scale").f, 1.0 / std::sqrt(static_cast<double>(head_dim)), 1e-6) << n.name;
  EXPECT_EQ(n.attrs.at("layout").s, layout) << n.name;
  EXPECT_EQ(n.attrs.at("mask").s, mask) << n.name;
  EXPECT_EQ(n.attrs.at("kv_cache").i, kv_cache) << n.name;
  EXPECT_FALSE(n.replaced_nodes.empty()) << n.name;
}

int fused_count(const PassContext& ctx) {
  int n = 0;
  for (const auto& s : ctx.attention_sites) n += s.reason.empty();
  return n;
}
std::string unfused_reasons(const PassContext& ctx) {
  std::string r;
  for (const auto& s : ctx.attention_sites)
    if (!s.reason.empty()) r += s.softmax + ": " + s.reason + "\n";
  return r;
}

// ---- ControlTransformer (bsd, KV cache, bool mask) ------------------------------------------------

void check_control_transformer(const Graph& original, Graph g) {
  PassContext ctx;
  ctx.disabled = {"selected_row_narrowing"};  // which would give the last layer one query row
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  EXPECT_EQ(fused_count(ctx), 2) << unfused_reasons(ctx);
  EXPECT_EQ(count(g, "Softmax"), 0);
  auto att = attention_nodes(g);
  ASSERT_EQ(att.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    const Node& n = *att[l];
    const std::string p = "/blocks." + std::to_string(l) + "/attn/";
    expect_attrs(n, 2, 32, "bsd", "bool", 1);
    EXPECT_EQ(in_name(g, n, 0), p + "q_proj/Add_output_0");
    EXPECT_EQ(in_name(g, n, 1), p + "k_proj/Add_output_0");
    EXPECT_EQ(in_name(g, n, 2), p + "v_proj/Add_output_0");
    EXPECT_EQ(in_name(g, n, 3), "mask");  // Where(Cast(Not(mask)), -inf, scores) is mask itself
    EXPECT_EQ(in_name(g, n, 4), input_of(original, p + "Concat", 0));
    EXPECT_EQ(in_name(g, n, 5), input_of(original, p + "Concat_1", 0));
    EXPECT_EQ(out_name(g, n, 0), p + "Reshape_3_output_0");
    EXPECT_EQ(out_name(g, n, 1), p + "Concat_output_0");
    EXPECT_EQ(out_name(g, n, 2), p + "Concat_1_output_0");
  }
  EXPECT_EQ(count(g, "Not"), 0);  // the inverted mask died with the Where
}

TEST(AttentionFusion, ControlTransformerSmallSymbolic) {
  IMPORT_SMALL(g, "control_transformer");
  check_control_transformer(*g, *g);
}

TEST(AttentionFusion, ControlTransformerSmallConcreteShapes) {
  IMPORT_SMALL(g, "control_transformer");
  Graph s = *g;
  // Incremental: one timestep (34 tokens) on 68 cached tokens.
  ASSERT_TRUE(specialize_inputs(s, {{"batch_data_cam_front_left", Shape{1, 1, 3, 32, 32}},
                                    {"cached_projected_embeddings", Shape{1, 68, 64}},
                                    {"cached_kv", Shape{2, 2, 1, 68, 64}},
                                    {"mask", Shape{34, 102}}})
                  .ok());
  check_control_transformer(*g, s);
}

// ---- GPT-2 (bhsd, past/present, causal) ------------------------------------------------------------

void check_gpt2(Graph g) {
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  EXPECT_EQ(fused_count(ctx), 2) << unfused_reasons(ctx);
  EXPECT_EQ(count(g, "Softmax"), 0);
  auto att = attention_nodes(g);
  ASSERT_EQ(att.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    const Node& n = *att[l];
    const std::string i = std::to_string(l);
    expect_attrs(n, 2, 32, "bhsd", "causal", 1);
    EXPECT_EQ(in_name(g, n, 0), "/h." + i + "/attn/Transpose_output_0");
    EXPECT_EQ(in_name(g, n, 1), "/h." + i + "/attn/Transpose_1_output_0");
    EXPECT_EQ(in_name(g, n, 2), "/h." + i + "/attn/Transpose_2_output_0");
    EXPECT_EQ(in_name(g, n, 3), "<absent>");
    EXPECT_EQ(in_name(g, n, 4), "past_key_" + i);
    EXPECT_EQ(in_name(g, n, 5), "past_value_" + i);
    EXPECT_EQ(out_name(g, n, 0), "/h." + i + "/attn/MatMul_1_output_0");
    EXPECT_EQ(out_name(g, n, 1), "present_key_" + i);
    EXPECT_EQ(out_name(g, n, 2), "present_value_" + i);
  }
}

TEST(AttentionFusion, Gpt2SmallConcreteShapes) {
  IMPORT_SMALL(g, "gpt2");
  for (auto [seq, past] : {std::pair<int64_t, int64_t>{7, 0}, {1, 9}, {4, 5}}) {
    SCOPED_TRACE("seq " + std::to_string(seq) + " past " + std::to_string(past));
    Graph s = *g;
    std::map<std::string, Shape> shapes = {{"input_ids", Shape{1, seq}}};
    for (int l = 0; l < 2; ++l) {
      shapes["past_key_" + std::to_string(l)] = Shape{1, 2, past, 32};
      shapes["past_value_" + std::to_string(l)] = Shape{1, 2, past, 32};
    }
    ASSERT_TRUE(specialize_inputs(s, shapes).ok());
    check_gpt2(s);
  }
}

// ---- ViT (nn.MultiheadAttention, sequence-first) ----------------------------------------------------

void check_vit(Graph g) {
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(g, ctx).ok());
  EXPECT_EQ(fused_count(ctx), 2) << unfused_reasons(ctx);
  EXPECT_EQ(count(g, "Softmax"), 0);
  auto att = attention_nodes(g);
  ASSERT_EQ(att.size(), 2u);
  for (const Node* n : att) {
    expect_attrs(*n, 2, 32, "sbd", "none", 0);
    EXPECT_EQ(n->inputs.size(), 3u);
    EXPECT_EQ(n->outputs.size(), 1u);
    // Sequence-first q/k/v go in as they are: no Transpose between the projections and the node
    // (at batch 2 each would be a copy), and the output is [S, B, D] like q.
    for (size_t i = 0; i < 3; ++i) {
      const int p = g.values[n->inputs[i]].producer;
      ASSERT_GE(p, 0);
      EXPECT_NE(g.nodes[p].op_type, "Transpose") << n->name << " input " << i;
    }
    const auto& qs = g.values[n->inputs[0]].shape;
    ASSERT_TRUE(qs && qs->size() == 3);
    EXPECT_EQ((*qs)[1].str(), "2") << n->name << ": q is not [S, B=2, D]";
    EXPECT_EQ(g.values[n->outputs[0]].shape, qs);
  }
  for (const Node& n : g.nodes) EXPECT_EQ(n.name.find("/to_bsd"), std::string::npos) << n.name;
}

TEST(AttentionFusion, VitSmallConcreteShapes) {
  IMPORT_SMALL(g, "vit");
  Graph s = *g;
  ASSERT_TRUE(specialize_inputs(s, {{"input", Shape{2, 3, 32, 32}}}).ok());
  check_vit(s);
}

// ---- reporting -----------------------------------------------------------------------------------

// x:[2,8] -> MatMul(W) -> Softmax: a classifier head, attention-like by its inputs but no ·V.
OnnxModelBuilder classifier_model() {
  OnnxModelBuilder b;
  b.input("x", DType::kFloat32, {int64_t{2}, int64_t{8}});
  std::vector<float> w(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
  b.initializer_f("w", w, {8, 4});
  b.node("MatMul", {"x", "w"}, {"logits"}, "head");
  OnnxModelBuilder::int_attr(b.node("Softmax", {"logits"}, {"probs"}, "probs_softmax"), "axis", -1);
  b.output("probs");
  return b;
}

TEST(AttentionFusion, NonAttentionSoftmaxIsReportedWithAReason) {
  auto g = classifier_model().import();
  ASSERT_TRUE(g.ok()) << g.status().message();
  PassContext ctx;
  ASSERT_TRUE(run_pass_pipeline(*g, ctx).ok());
  ASSERT_EQ(ctx.attention_sites.size(), 1u);
  EXPECT_EQ(ctx.attention_sites[0].softmax, "probs_softmax");
  EXPECT_TRUE(ctx.attention_sites[0].fused_node.empty());
  EXPECT_NE(ctx.attention_sites[0].reason.find("MatMul"), std::string::npos) << ctx.attention_sites[0].reason;
  EXPECT_EQ(count(*g, "Softmax"), 1);
}

TEST(AttentionFusion, AttentionRequiredTurnsAMissIntoAnError) {
  auto g = classifier_model().import();
  ASSERT_TRUE(g.ok());
  PassContext ctx;
  ctx.attention_required = true;
  Status st = run_pass_pipeline(*g, ctx);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("probs_softmax"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("not fused"), std::string::npos) << st.message();
}

TEST(AttentionFusion, AttentionRequiredPassesWhenEverySiteIsFused) {
  IMPORT_SMALL(g, "control_transformer");
  PassContext ctx;
  ctx.attention_required = true;
  Status st = run_pass_pipeline(*g, ctx);
  EXPECT_TRUE(st.ok()) << st.message();
}

// ---- on/off runs -----------------------------------------------------------------------------------

struct RunResult {
  std::vector<Tensor> outputs;
};

// A build or run that fails is a test failure (the fused one included: a fusion regression must not
// pass for a missing plugin).
RunResult run_case(const Graph& g, const std::map<std::string, Tensor>& inputs, bool fusion) {
  RunResult r;
  BuildOptions opts;
  for (const auto& [name, t] : inputs) opts.input_shapes[name] = t.shape();
  if (!fusion) opts.disabled_passes.insert("attention_fusion");
  auto plan = build_plan(g, opts);
  EXPECT_TRUE(plan.ok()) << (fusion ? "fused: " : "unfused: ") << plan.status().message();
  if (!plan.ok()) return r;
  auto ctx = ExecutionContext::create(*plan);
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return r;
  for (const auto& [name, t] : inputs) EXPECT_TRUE((*ctx)->set_input(name, t.view()).ok()) << name;
  Status st = (*ctx)->run();
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return r;
  for (size_t i = 0; i < (*ctx)->num_outputs(); ++i) r.outputs.push_back(Tensor::copy_of((*ctx)->output(i)));
  return r;
}

void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = read_double(a.view(), i), y = read_double(b.view(), i);
    if (std::isnan(x) && std::isnan(y)) continue;
    const double err = std::abs(x - y) - 1e-3 * std::abs(y);
    worst = std::isnan(err) ? INFINITY : std::max(worst, err);
  }
  EXPECT_LE(worst, 1e-4) << what;
}

void on_off(const std::string& model, const std::vector<std::string>& cases) {
  const std::string path = export_small(model);
  ASSERT_FALSE(path.empty());
  auto g = import_onnx_file(path);
  ASSERT_TRUE(g.ok()) << g.status().message();
  for (const auto& c : cases) {
    SCOPED_TRACE(model + " case " + c);
    const fs::path dir = work_dir() / ("ref_" + model) / c;
    std::map<std::string, Tensor> inputs;
    for (int v : g->inputs) {
      auto t = read_npy((dir / "inputs" / (sanitize_file_name(g->values[v].name) + ".npy")).string());
      ASSERT_TRUE(t.ok()) << t.status().message();
      inputs[g->values[v].name] = *t;
    }
    RunResult on = run_case(*g, inputs, true);
    RunResult off = run_case(*g, inputs, false);
    ASSERT_EQ(on.outputs.size(), g->outputs.size());
    ASSERT_EQ(off.outputs.size(), g->outputs.size());
    for (size_t i = 0; i < g->outputs.size(); ++i) {
      const std::string name = g->values[g->outputs[i]].name;
      expect_close(on.outputs[i], off.outputs[i], name + " fused vs unfused");
      auto expected = read_npy((dir / "expected" / (sanitize_file_name(name) + ".npy")).string());
      ASSERT_TRUE(expected.ok()) << expected.status().message();
      expect_close(on.outputs[i], *expected, name + " fused vs PyTorch");
    }
  }
}

TEST(AttentionFusion, ControlTransformerOnOff) {
  on_off("control_transformer", {"incremental", "full"});
}

TEST(AttentionFusion, Gpt2OnOff) {
  on_off("gpt2", {"prefill", "decode"});
}

TEST(AttentionFusion, VitOnOff) {
  on_off("vit", {"batch1", "batch2"});
}

}  // namespace
}  // namespace kiln
