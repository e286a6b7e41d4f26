'use strict'

// IO_HYGIENE_* variables carry install() options; env.js reads them. Every
// start looks for them here and loads env.js only if some name may be one:
// nearly never.
const PREFIX = 'IO_HYGIENE_'

// H, Y, G and N are each once in the prefix; two edits leave at least two of
// them. The first test: most names fail it, and it costs a start far less than
// the pairs (four searches of the head against ten).
function twoOfHygn (head) {
  return (head.includes('H') ? 1 : 0) + (head.includes('Y') ? 1 : 0) + (head.includes('G') ? 1 : 0) + (head.includes('N') ? 1 : 0) >= 2
}

// Pairs of neighbouring letters in the prefix. One edit breaks at most three
// (a swap of neighbours), so a name within two edits keeps at least four of
// the ten.
const PAIRS = Array.from({ length: PREFIX.length - 1 }, (_, i) => PREFIX.slice(i, i + 2))

// Whether a name may be ours: the prefix in any case, or a head that passes
// both tests for two edits of it (env.js measures the distance).
function mayBeOurs (name) {
  const head = name.slice(0, PREFIX.length + 2).toUpperCase()
  if (!twoOfHygn(head)) return false
  if (head.startsWith(PREFIX)) return true
  let kept = 0
  for (const pair of PAIRS) if (head.includes(pair)) kept++
  return kept >= PAIRS.length - 6
}

function mayMentionUs (env = process.env) {
  return Object.keys(env).some(mayBeOurs)
}

module.exports = { PREFIX, mayBeOurs, mayMentionUs }
