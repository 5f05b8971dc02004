#pragma once
// The model shape a checkpoint records as its "merak.model" metadata
// (docs/checkpoint-format.md): a JSON object such as
//   {"dim":384,"family":"gpt","heads":6,"layers":6,"seq":256,"vocab":256}
// plus "tied_head":false for an untied GPT head, and for the Llama family
// "query_groups", "ffn_hidden", "rotary_base" and "norm_epsilon". A resumed
// run compares the text byte for byte, so every writer goes through
// model_metadata_json.

#include <string>

#include "model/gpt.hpp"

namespace merak::model {

// The "merak.model" text of `config` ("custom" family for a model of one's
// own).
std::string model_metadata_json(const gpt_config& config);

// The inverse for the built-in families: the config whose
// model_metadata_json is `text`. Throws merak::error naming `where` and the
// field when the text is not such an object (a custom model's included).
gpt_config parse_model_metadata(const std::string& text, const std::string& where);

}  // namespace merak::model
