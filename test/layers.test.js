'use strict'

// Dependencies point one way: entry points -> install -> features -> metrics
// -> core. This walks every require() of the package's own files and fails on
// an edge that points up, a sideways edge nobody decided on, or a cycle.
const t = require('tap')
const fs = require('node:fs')
const path = require('node:path')

const root = path.join(__dirname, '..')
const LAYERS = { core: 0, metrics: 1, feature: 2, install: 3, entry: 4 }
const FEATURES = ['dns', 'batch', 'http', 'kafka', 'statsd', 'monitor']
const MAX_LINES = 600

// [layer, unit] of a file, or null for a place the layout does not name.
function layerOf (rel) {
  if (rel.startsWith('lib/core/')) return ['core', 'core']
  if (rel.startsWith('lib/metrics/')) return ['metrics', 'metrics']
  const m = /^lib\/([a-z]+)(?:\/|\.js$)/.exec(rel)
  if (m !== null && FEATURES.includes(m[1])) return ['feature', m[1]]
  if (rel === 'lib/install.js' || rel === 'lib/install-options.js' || rel === 'lib/env.js') return ['install', rel]
  if (rel === 'index.js' || rel === 'register.js' || rel === 'register') return ['entry', rel]
  return null
}

// Sideways edges between features, each a decision: the HTTP sink and the
// Kafka wrapper are built on the batcher; statsd and the monitor ask dns which
// cache serves dns.lookup.
const SIDEWAYS = new Set(['http>batch', 'kafka>batch', 'statsd>dns', 'monitor>dns'])
// Files allowed a require() whose argument is not a literal: index.js's lazy()
// loader (its paths are read from the lazy('...') calls), and kafkajs's own
// files, reached by their install path.
const DYNAMIC = new Set(['index.js', 'lib/kafka/kafkajs-patch.js', 'lib/kafka/kafkajs-known.js', 'lib/kafka/send-messages.js', 'lib/kafka/unpoisoned.js'])

function sourceFiles () {
  const lib = fs.readdirSync(path.join(root, 'lib'), { recursive: true })
    .filter((f) => f.endsWith('.js'))
    .map((f) => path.posix.join('lib', f.split(path.sep).join('/')))
  return [...lib, 'index.js', 'register.js', 'register'].filter((f) => fs.existsSync(path.join(root, f)))
}

// file -> { lines, edges: [{ to, pkg }], dynamic }
function readGraph () {
  const graph = new Map()
  for (const file of sourceFiles()) {
    const text = fs.readFileSync(path.join(root, file), 'utf8')
    const code = text.split('\n').filter((line) => !/^\s*(\/\/|\*|\/\*)/.test(line)).join('\n')
    const specs = [...code.matchAll(/\brequire\(\s*(['"])([^'"]+)\1\s*\)/g)].map((m) => m[2])
    if (layerOf(file)?.[0] === 'entry') specs.push(...[...code.matchAll(/\blazy\(\s*(['"])([^'"]+)\1/g)].map((m) => m[2]))
    const literal = [...code.matchAll(/\brequire\(\s*['"]/g)].length
    const dynamic = [...code.matchAll(/\brequire\(/g)].length > literal
    const edges = []
    for (const spec of specs) {
      if (spec.startsWith('node:')) continue
      if (spec.startsWith('.')) {
        const abs = require.resolve(path.resolve(root, path.dirname(file), spec))
        edges.push({ to: path.relative(root, abs).split(path.sep).join('/'), pkg: null })
      } else {
        edges.push({ to: null, pkg: spec })
      }
    }
    graph.set(file, { lines: text.split('\n').length - (text.endsWith('\n') ? 1 : 0), edges, dynamic })
  }
  return graph
}

// Every rule the layout sets; a list of problems, empty when it holds.
function check (graph) {
  const problems = []
  for (const [file, node] of graph) {
    const from = layerOf(file)
    if (from === null) {
      problems.push(`no layer: ${file} is in no place the layout names`)
      continue
    }
    if (node.dynamic && !DYNAMIC.has(file)) problems.push(`dynamic require: ${file}`)
    if (file.startsWith('lib/') && node.lines > MAX_LINES) problems.push(`over ${MAX_LINES} lines: ${file} (${node.lines})`)
    for (const { to, pkg } of node.edges) {
      if (pkg !== null) {
        if (from[0] === 'core' || from[0] === 'metrics') problems.push(`package in ${from[0]}: ${file} -> ${pkg}`)
        continue
      }
      if (!graph.has(to)) {
        if (to !== 'package.json') problems.push(`outside the walk: ${file} -> ${to}`)
        continue
      }
      const dest = layerOf(to)
      if (dest === null) continue
      if (LAYERS[dest[0]] > LAYERS[from[0]]) problems.push(`upward: ${file} -> ${to}`)
      if (from[0] === 'feature' && dest[0] === 'feature' && from[1] !== dest[1] && !SIDEWAYS.has(`${from[1]}>${dest[1]}`)) {
        problems.push(`sideways: ${file} -> ${to} (${from[1]} > ${dest[1]} is not a decided edge)`)
      }
      if (file === 'lib/env.js' && to === 'lib/install.js') problems.push(`upward: ${file} -> ${to}`)
      if (to === 'lib/install.js' && from[0] !== 'entry') problems.push(`install.js required by ${file}`)
    }
  }
  // Cycles: depth-first, white/grey/black.
  const colour = new Map()
  const stack = []
  function visit (file) {
    colour.set(file, 'grey')
    stack.push(file)
    for (const { to } of graph.get(file).edges) {
      if (to === null || !graph.has(to)) continue
      if (colour.get(to) === 'grey') {
        problems.push(`cycle: ${[...stack.slice(stack.indexOf(to)), to].join(' -> ')}`)
      } else if (!colour.has(to)) {
        visit(to)
      }
    }
    stack.pop()
    colour.set(file, 'black')
  }
  for (const file of graph.keys()) if (!colour.has(file)) visit(file)
  return problems
}

function withEdge (graph, from, to) {
  const copy = new Map([...graph].map(([file, node]) => [file, { ...node, edges: [...node.edges] }]))
  copy.get(from).edges.push({ to, pkg: null })
  return copy
}

const graph = readGraph()

t.test('every require() under lib/ points down, or sideways where decided; no cycle', async (t) => {
  t.ok(graph.size > 30, 'the walk found the package\'s files')
  t.same(check(graph), [])
})

t.test('the checker catches an upward edge', async (t) => {
  const problems = check(withEdge(graph, 'lib/core/errors.js', 'lib/install.js'))
  t.ok(problems.includes('upward: lib/core/errors.js -> lib/install.js'), problems.join('\n'))
  t.ok(problems.includes('install.js required by lib/core/errors.js'))
})

t.test('the checker catches a cycle and an undecided sideways edge', async (t) => {
  const cyclic = withEdge(withEdge(graph, 'lib/metrics/registry.js', 'lib/core/errors.js'), 'lib/core/errors.js', 'lib/metrics/registry.js')
  t.ok(check(cyclic).some((p) => p.startsWith('cycle: ') && p.includes('lib/core/errors.js -> lib/metrics/registry.js')))
  const sideways = check(withEdge(graph, 'lib/dns/cache.js', 'lib/http/agent.js'))
  t.ok(sideways.some((p) => p.startsWith('sideways: lib/dns/cache.js -> lib/http/agent.js')))
})
