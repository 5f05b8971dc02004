#include "apps/model_flags.hpp"

#include <CLI/CLI.hpp>

#include "core/error.hpp"

namespace merak::apps {
namespace {

// A Llama-only switch or shape flag given with --model gpt: fails naming it.
void refuse_for_gpt(bool given, const char* flag) {
  if (given) fail("{} needs --model llama (the GPT family does not have it)", flag);
}

}  // namespace

void apply_model_family(const model_family_flags& f, model::gpt_config& m) {
  m.family = model::parse_model_family(f.model);
  if (f.max_position_embeddings != 0 && f.max_position_embeddings < m.max_seq)
    fail("--max-position-embeddings ({}) must be at least --seq-length ({})",
         f.max_position_embeddings, m.max_seq);
  if (m.family == model::model_family::gpt) {
    refuse_for_gpt(f.normalization == "RMSNorm", "--normalization RMSNorm");
    refuse_for_gpt(f.position_embedding_type == "rope", "--position-embedding-type rope");
    refuse_for_gpt(f.swiglu, "--swiglu");
    refuse_for_gpt(f.disable_bias_linear, "--disable-bias-linear");
    refuse_for_gpt(f.group_query_attention, "--group-query-attention");
    refuse_for_gpt(m.query_groups != 0, "--num-query-groups");
    refuse_for_gpt(m.ffn_hidden != 0, "--ffn-hidden-size");
    refuse_for_gpt(f.rotary_base != 0, "--rotary-base");
    refuse_for_gpt(f.norm_epsilon != 0, "--norm-epsilon");
    if (!f.normalization.empty() && f.normalization != "LayerNorm")
      fail("--normalization must be LayerNorm or RMSNorm (got '{}')", f.normalization);
    if (!f.position_embedding_type.empty() && f.position_embedding_type != "learned_absolute")
      fail("--position-embedding-type must be learned_absolute or rope (got '{}')",
           f.position_embedding_type);
    return;
  }
  if (!f.normalization.empty() && f.normalization != "RMSNorm")
    fail("--normalization {}: --model llama normalizes with RMSNorm", f.normalization);
  if (!f.position_embedding_type.empty() && f.position_embedding_type != "rope")
    fail("--position-embedding-type {}: --model llama uses rope", f.position_embedding_type);
  // Megatron: --group-query-attention without --num-query-groups is one group.
  if (f.group_query_attention && m.query_groups == 0) m.query_groups = 1;
  if (f.rotary_base != 0) m.rotary_base = float(f.rotary_base);
  if (f.norm_epsilon != 0) m.norm_epsilon = float(f.norm_epsilon);
  m.tied_head = false;
}

void add_model_family_flags(CLI::App* c, model_family_flags* f, model::gpt_config* model) {
  model::gpt_config& m = *model;
  c->add_option("--model", f->model, "Model family: gpt (GPT-2) or llama")->capture_default_str();
  c->add_option("--make-vocab-size-divisible-by", m.vocab_divisible_by,
                "Pad the embedding and output layer to a multiple of this many rows "
                "(the padding never scores: the loss leaves it out)")
      ->capture_default_str();
  c->add_option("--num-query-groups", m.query_groups,
                "Llama: key/value head groups (default: one per head)");
  c->add_option("--ffn-hidden-size", m.ffn_hidden,
                "Llama: SwiGLU width F (default: 8C/3 rounded down to a multiple of 64)");
  c->add_option("--max-position-embeddings", f->max_position_embeddings,
                "Positions the model supports (at least --seq-length)");
  c->add_option("--rotary-base", f->rotary_base, "Llama: rotary base theta (default 10000)");
  c->add_option("--norm-epsilon", f->norm_epsilon, "Llama: RMSNorm epsilon (default 1e-5)");
  c->add_option("--normalization", f->normalization, "LayerNorm (gpt) or RMSNorm (llama)");
  c->add_option("--position-embedding-type", f->position_embedding_type,
                "learned_absolute (gpt) or rope (llama)");
  c->add_flag("--swiglu", f->swiglu, "Llama: SwiGLU MLP (implied by --model llama)");
  c->add_flag("--disable-bias-linear", f->disable_bias_linear,
              "Llama: linears without bias (implied by --model llama)");
  c->add_flag("--group-query-attention", f->group_query_attention,
              "Llama: grouped-query attention (--num-query-groups, default 1)");
}

}  // namespace merak::apps
