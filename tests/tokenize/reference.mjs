// The independent side of the token-equality test: the npm packages' own tokenizers.
//
//   node reference.mjs files OUT_DIR     writes the vocabulary files partrain reads, from the
//                                        packages' data (nothing from partrain):
//       r50k.tiktoken, cl100k.tiktoken, o200k.tiktoken   js-tiktoken's ranks
//       llama3.tiktoken                                  llama3-tokenizer-js's vocabulary
//       llama3.tokenizer.json                            its vocabulary + merges (ignore_merges)
//       gpt2.tokenizer.json                              r50k's ranks as vocab + merges
//   node reference.mjs encode NAME CORPUS.jsonl OUT.u32  the reference ids of every document,
//                                        each preceded by the separator, as little-endian uint32
//
// NAME: r50k, cl100k, o200k (the npm package tiktoken: OpenAI's Rust tokenizer built to
// wasm, with its own copy of the ranks, so the ranks files partrain reads, from js-tiktoken,
// are checked too; 20x faster than js-tiktoken's encoder), llama3 (llama3-tokenizer-js).
import fs from 'node:fs';
import path from 'node:path';
import { get_encoding } from 'tiktoken';
import r50k from 'js-tiktoken/ranks/r50k_base';
import cl100k from 'js-tiktoken/ranks/cl100k_base';
import o200k from 'js-tiktoken/ranks/o200k_base';
import { Llama3Tokenizer } from 'llama3-tokenizer-js';

const RANKS = { r50k, cl100k, o200k };

// js-tiktoken's compressed form: lines "! OFFSET TOKEN TOKEN ..." (base64 tokens, ranks
// counting up from OFFSET), as its own loader reads them.
function ranksOf(data) {
  const out = [];
  for (const line of data.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, offsetStr, ...tokens] = line.split(' ');
    const offset = Number.parseInt(offsetStr, 10);
    tokens.forEach((t, i) => { out[offset + i] = Buffer.from(t, 'base64'); });
  }
  return out;
}

function writeTiktoken(file, ranks) {
  const lines = [];
  ranks.forEach((bytes, rank) => { if (bytes) lines.push(`${bytes.toString('base64')} ${rank}`); });
  fs.writeFileSync(file, lines.join('\n') + '\n');
}

// GPT-2's bytes_to_unicode, as in OpenAI's encoder.py.
const BYTE_CHAR = (() => {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = new Array(256);
  bs.forEach((b, i) => { m[b] = String.fromCharCode(cs[i]); });
  return m;
})();
const spell = (bytes) => Array.from(bytes, (b) => BYTE_CHAR[b]).join('');
const unspell = (s) => Buffer.from(Array.from(s, (c) => BYTE_CHAR.indexOf(c)));

// Merges from ranks (tiktoken's own derivation): token r splits into the two parts that
// BPE with the ranks below r leaves of its bytes.
function mergesOf(ranks) {
  const rankOf = new Map(ranks.map((b, r) => [b.toString('latin1'), r]));
  const merges = [];
  for (let r = 0; r < ranks.length; r++) {
    const bytes = ranks[r];
    if (bytes.length < 2) continue;
    let parts = Array.from(bytes, (b) => Buffer.from([b]));
    for (;;) {
      let best = -1, bestRank = Infinity;
      for (let i = 0; i + 1 < parts.length; i++) {
        const k = rankOf.get(Buffer.concat([parts[i], parts[i + 1]]).toString('latin1'));
        if (k !== undefined && k < r && k < bestRank) { bestRank = k; best = i; }
      }
      if (best < 0) break;
      parts.splice(best, 2, Buffer.concat([parts[best], parts[best + 1]]));
    }
    if (parts.length !== 2) throw new Error(`token ${r} does not split into two`);
    merges.push(`${spell(parts[0])} ${spell(parts[1])}`);
  }
  return merges;
}

function tokenizerJson(vocab, merges, specials, pattern, ignoreMerges) {
  const pre = pattern === null
    ? { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true }
    : { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
  return JSON.stringify({
    version: '1.0', truncation: null, padding: null,
    added_tokens: Object.entries(specials).map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null, pre_tokenizer: pre, post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
             ignore_merges: ignoreMerges, vocab, merges },
  });
}

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function files(outDir) {
  fs.mkdirSync(outDir, { recursive: true });
  for (const [name, data] of Object.entries(RANKS)) writeTiktoken(path.join(outDir, `${name}.tiktoken`), ranksOf(data));
  // GPT-2's tokenizer.json: the r50k ranks spelled byte-level, merges in rank order.
  const gpt2 = ranksOf(r50k);
  const vocab = {};
  gpt2.forEach((b, id) => { vocab[spell(b)] = id; });
  vocab['<|endoftext|>'] = 50256;
  fs.writeFileSync(path.join(outDir, 'gpt2.tokenizer.json'),
                   tokenizerJson(vocab, mergesOf(gpt2), { '<|endoftext|>': 50256 }, null, false));
  // Llama 3: the package's vocabulary (row = id) and merges (priority order).
  const llama = new Llama3Tokenizer();
  const base = llama.vocabById.slice(0, 128000);
  writeTiktoken(path.join(outDir, 'llama3.tiktoken'), base.map(unspell));
  const lvocab = {};
  base.forEach((s, id) => { lvocab[s] = id; });
  // Keyed "LEFT RIGHT" in byte-level spelling (no spelled token has a space), valued by priority.
  const lmerges = [...llama.merges.entries()].sort((a, b) => a[1] - b[1]).map(([key]) => key);
  const specials = {};
  for (let id = 128000; id < llama.vocabById.length; id++) specials[llama.vocabById[id]] = id;
  fs.writeFileSync(path.join(outDir, 'llama3.tokenizer.json'),
                   tokenizerJson(lvocab, lmerges, specials, LLAMA3_PATTERN, true));
}

function encoder(name) {
  if (name === 'llama3') {
    const llama = new Llama3Tokenizer();
    return { sep: 128001, encode: (t) => llama.encode(t, { bos: false, eos: false }) };
  }
  const enc = get_encoding(`${name}_base`);
  const sep = RANKS[name].special_tokens['<|endoftext|>'];
  return { sep, encode: (t) => enc.encode_ordinary(t) };  // no special tokens
}

function encodeCorpus(name, corpus, out) {
  const { sep, encode } = encoder(name);
  const ids = [];
  for (const line of fs.readFileSync(corpus, 'utf8').split('\n')) {
    if (!line.trim()) continue;
    ids.push(sep);
    for (const id of encode(JSON.parse(line).text)) ids.push(id);
  }
  fs.writeFileSync(out, Buffer.from(new Uint32Array(ids).buffer));
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'files') files(args[0]);
else if (cmd === 'encode') encodeCorpus(args[0], args[1], args[2]);
else { console.error('usage: reference.mjs files OUT_DIR | encode NAME CORPUS.jsonl OUT.u32'); process.exit(2); }
