// The peer of encode_vs_tiktoken.sh: OpenAI's tiktoken (its Rust core compiled to WASM, the
// npm package "tiktoken") and js-tiktoken (pure JavaScript) encoding a .jsonl corpus on N
// worker threads (documents dealt round-robin), timed from the first document to the last.
//
//   node tiktoken_peer.mjs tiktoken|js-tiktoken ENCODING CORPUS.jsonl THREADS
// prints: MB_PER_S TOKENS
import fs from 'node:fs';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

async function makeEncoder(impl, name) {
  if (impl === 'tiktoken') {
    const { get_encoding } = await import('tiktoken');
    const enc = get_encoding(name);
    return (t) => enc.encode_ordinary(t).length;
  }
  const { getEncoding } = await import('js-tiktoken');
  const enc = getEncoding(name);
  return (t) => enc.encode(t, [], []).length;
}

if (isMainThread) {
  const [impl, name, corpus, threadsArg] = process.argv.slice(2);
  const threads = Number(threadsArg);
  const docs = fs.readFileSync(corpus, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).text);
  const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
  const shares = Array.from({ length: threads }, (_, i) => docs.filter((_, j) => j % threads === i));
  const workers = shares.map((share) => new Worker(new URL(import.meta.url), { workerData: { impl, name, share } }));
  // Each worker loads its encoder, then waits for "go", so loading is not timed.
  await Promise.all(workers.map((w) => new Promise((ok) => w.once('message', ok))));
  const t0 = process.hrtime.bigint();
  const counts = await Promise.all(workers.map((w) => new Promise((ok) => { w.once('message', ok); w.postMessage('go'); })));
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  workers.forEach((w) => w.terminate());
  console.log(`${(bytes / 1e6 / s).toFixed(2)} ${counts.reduce((a, b) => a + b, 0)}`);
} else {
  const encode = await makeEncoder(workerData.impl, workerData.name);
  parentPort.postMessage('ready');
  parentPort.once('message', () => {
    let n = 0;
    for (const d of workerData.share) n += encode(d);
    parentPort.postMessage(n);
  });
}
