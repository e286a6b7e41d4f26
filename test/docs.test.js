'use strict'

// The docs (README.md and docs/**/*.md), the types and the code must say the
// same thing: every error code, and every option with its default. Each
// feature's options table sits in that feature's page; every code block runs.
const t = require('tap')
const fs = require('node:fs')
const path = require('node:path')
const net = require('node:net')
const { codes } = require('../lib/core/errors')

const root = path.join(__dirname, '..')
const types = fs.readFileSync(path.join(root, 'types', 'index.d.ts'), 'utf8')

// Every page, README first: { file (relative, with /), text }.
function pages () {
  const out = [{ file: 'README.md', text: fs.readFileSync(path.join(root, 'README.md'), 'utf8') }]
  const walk = (dir) => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const rel = `${dir}/${entry.name}`
      if (entry.isDirectory()) walk(rel)
      else if (entry.name.endsWith('.md')) out.push({ file: rel, text: fs.readFileSync(path.join(root, rel), 'utf8') })
    }
  }
  if (fs.existsSync(path.join(root, 'docs'))) walk('docs')
  return out
}
const docs = pages()

// The page holding `<!-- marker -->` (exactly one may), and the rows of the
// markdown table that follows it.
function table (marker) {
  const holders = docs.filter((page) => page.text.includes(`<!-- ${marker} -->`))
  if (holders.length !== 1) return { files: holders.map((p) => p.file), rows: null }
  const { file, text } = holders[0]
  const rows = []
  for (const line of text.slice(text.indexOf(`<!-- ${marker} -->`)).split('\n').slice(1)) {
    if (!line.startsWith('|')) {
      if (rows.length > 0) break
      continue
    }
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((cell) => cell.trim()))
  }
  return { files: [file], rows: rows.slice(2) } // header and separator
}

t.test('every error code constructs with its class, and docs/errors.md and the types list exactly those', async (t) => {
  const { files, rows } = table('errors')
  t.same(files, ['docs/errors.md'], 'one errors table, in docs/errors.md')
  const documented = Object.fromEntries(rows.map(([code, cls]) => [code.replace(/`/g, ''), cls]))
  t.same(Object.keys(documented).sort(), Object.keys(codes).sort(), 'docs/errors.md lists every code, and no other')
  const typed = [...types.matchAll(/'(ERR_IO_HYGIENE_[A-Z_]+)'/g)].map((m) => m[1])
  t.same([...new Set(typed)].sort(), Object.keys(codes).sort(), 'types list every code, and no other')
  for (const [code, Class] of Object.entries(codes)) {
    const err = new Class('a', 'b', ['c'], 'd', { cause: new Error('why') })
    t.equal(err.code, code)
    t.equal(err.cause.message, 'why', `${code} keeps its cause`)
    t.ok(err instanceof Error)
    const base = [RangeError, TypeError].find((B) => err instanceof B)?.name ?? 'Error'
    t.equal(base, documented[code], `${code} is a ${documented[code]}`)
    t.equal(err.name, base, `${code}: name is ${base}, as Node's own errors`)
    t.ok(err.stack.startsWith(`${base} [${code}]: ${err.message}\n`), `${code} shows in the stack`)
    t.equal(String(err), `${base} [${code}]: ${err.message}`)
    t.notOk(Object.keys(err).includes('name'))
    t.type(err.message, 'string')
  }
})

t.test('error messages describe the value they got', async (t) => {
  const { ERR_IO_HYGIENE_INVALID_OPTION } = codes
  const got = (value) => new ERR_IO_HYGIENE_INVALID_OPTION('x()', 'opt', 'a number', value).message
  t.match(got('5'), /got "5"$/)
  t.match(got(5n), /got 5n$/)
  t.match(got(null), /got null$/)
  t.match(got([1, 'a']), /got \[1,"a"\]$/)
  t.match(got([{}]), /got an array$/)
  t.match(got(['x'.repeat(80)]), /got an array$/)
  const because = new ERR_IO_HYGIENE_INVALID_OPTION('x()', 'opt', 'an address', 'b', { cause: new Error('not an IP') })
  t.equal(because.message, 'x(): option "opt" must be an address, got "b" (not an IP)', 'the reason is in the message')
  t.match(got({}), /got an object$/)
  t.match(got(() => {}), /got \(\) => \{\}$/)
})

// A default cell as a value: `10000`, `"/etc/hosts"`, `'wait'`, `null`, `true`.
function parseDefault (cell) {
  const raw = /^`(.*)`$/.exec(cell)?.[1]
  if (/^'.*'$/.test(raw)) return { value: raw.slice(1, -1) }
  return { value: JSON.parse(raw) }
}

const specOf = (defaults) => Object.fromEntries(Object.entries(defaults).map(([k, v]) => [k, { default: v }]))
const modules = {
  dns: require('../lib/dns/options').spec,
  batch: require('../lib/batch').spec,
  kafka: require('../lib/kafka').spec,
  statsd: specOf(require('../lib/statsd').defaults),
  monitor: require('../lib/monitor').spec,
  'http-sink': require('../lib/http/sink').spec,
  http: require('../lib/http/options').spec,
}

for (const [name, spec] of Object.entries(modules)) {
  t.test(`docs/${name}.md's options table equals the code's defaults`, async (t) => {
    const { files, rows } = table(`options:${name}`)
    t.same(files, [`docs/${name}.md`], `one options:${name} table, in the feature's own page`)
    if (rows === null) return
    const documented = Object.fromEntries(rows.map(([option, , , dflt]) => [option.replace(/`/g, ''), dflt]))
    t.same(Object.keys(documented).sort(), Object.keys(spec).sort(), 'every option, and no other')
    for (const [option, cell] of Object.entries(documented)) {
      const actual = spec[option]?.default
      if (typeof actual === 'function') {
        t.notMatch(cell, /^`null`$/, `${option}: a described default`)
      } else {
        t.same(parseDefault(cell).value, actual, `${option} defaults to ${cell}`)
      }
    }
  })
}

t.test('docs/channels.md lists every diagnostics channel, and no other', async (t) => {
  const { files, rows } = table('channels')
  t.same(files, ['docs/channels.md'])
  const { channels } = require('../lib/core/diagnostics')
  t.same(rows.map(([name]) => name.replace(/`/g, '')).sort(), Object.values(channels).map((c) => c.name).sort())
})

t.test('docs/configuration.md lists the modules install() applies, each on or off as the code says', async (t) => {
  const { files, rows } = table('install-modules')
  t.same(files, ['docs/configuration.md'])
  const { modules: installed } = require('../lib/install')
  t.same(Object.fromEntries(rows.map(([name, on]) => [name.replace(/`/g, ''), parseDefault(on).value])),
    Object.fromEntries(installed.map((mod) => [mod.name, mod.enabledByDefault])))
})

// Every code block of every page runs as a reader pastes it. A ```js block
// is a CommonJS file (CONTRIBUTING.md says why), an ```mjs block an ES
// module (a .mjs file): it is written as it stands to
// a file of its own, in a project directory outside the checkout whose
// node_modules holds this checkout as io-hygiene beside its dev dependencies,
// and run there by node in a child process. A block that talks to a server
// has `<!-- docs-test: NAME -->` right above it: CONTEXTS[NAME] starts the
// real server on 127.0.0.1 and points the block's host and port at it (the
// only change made to a block), says when a block that serves until stopped
// gets its SIGTERM, and checks what arrived. A ```sh block's `npm run`
// scripts and `node` files must exist; a ```text block is output, never run.
const os = require('node:os')
const { spawn } = require('node:child_process')
const http = require('node:http')
const { startStatsdReceiver } = require('./helpers/statsd-receiver')

function codeBlocks (text) {
  const out = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\w+)\s*$/.exec(lines[i])
    if (!open) continue
    let end = i + 1
    while (end < lines.length && lines[end] !== '```') end++
    let above = i - 1
    while (above >= 0 && lines[above].trim() === '') above--
    const context = /^<!-- docs-test: ([\w-]+) -->$/.exec(lines[above] ?? '')?.[1] ?? null
    out.push({ lang: open[1], line: i + 1, code: lines.slice(i + 1, end).join('\n'), context })
    i = end
  }
  return out
}

function replaceAll (code, replacements) {
  for (const [from, to] of replacements) {
    if (!code.includes(from)) throw new Error(`the block no longer contains ${JSON.stringify(from)}`)
    code = code.split(from).join(to)
  }
  return code
}

// A local HTTP server that records each request's body.
async function httpServer (t) {
  const bodies = []
  const server = http.createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks))
      res.end('ok')
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve) }))
  return { port: server.address().port, bodies }
}

function freePort () {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

async function statsdReceiver (t) {
  const r = await startStatsdReceiver()
  t.teardown(() => r.close())
  return r
}

// One broker for every block that needs one, started by the first.
let broker = null
async function kafkaBroker () {
  broker ??= require('./helpers/kafka-broker').startKafka()
  return (await broker).brokers[0]
}
t.teardown(async () => { if (broker !== null) await (await broker).close() })

const lines = (stdout) => stdout.trim().split('\n')

const CONTEXTS = {
  kafka: async () => ({
    replace: [["'kafka:9092'", `'${await kafkaBroker()}'`]],
    check: async (t, { stdout }) => t.same(lines(stdout), ['patched'], 'sent on the corrected kafkajs'),
  }),
  'platformatic-kafka': async () => ({
    replace: [["'kafka:9092'", `'${await kafkaBroker()}'`]],
    check: async (t, { stdout }) => t.same(lines(stdout), ['bigint'], 'sent, with its own offset'),
  }),
  statsd: async (t) => {
    const r = await statsdReceiver(t)
    return {
      replace: [["'statsd.internal'", "'127.0.0.1'"], ['8125', String(r.port)]],
      check: async (t) => t.ok(await r.waitFor((x) => x.find('api.requests').length === 1), 'the metric arrived'),
    }
  },
  'http-sink': async (t) => {
    const server = await httpServer(t)
    return {
      replace: [['https://logs.example.com/v1/ingest', `http://127.0.0.1:${server.port}/v1/ingest`]],
      check: async (t) => t.match(require('node:zlib').gunzipSync(server.bodies[0]).toString(), /"order placed"/, 'the record arrived'),
    }
  },
  http: async (t) => {
    const server = await httpServer(t)
    return {
      replace: [['http://service.internal:8080/', `http://localhost:${server.port}/`]],
      check: async (t, { stdout }) => {
        t.same(lines(stdout), ['2'], 'both went through our dispatcher')
        t.equal(server.bodies.length, 2, 'both arrived')
      },
    }
  },
  undici: async (t) => {
    const server = await httpServer(t)
    return {
      replace: [['http://service.internal:8080/', `http://localhost:${server.port}/`]],
      check: async (t, { stdout }) => t.same(lines(stdout), ['1'], 'the Agent resolved through the cache'),
    }
  },
  clients: async (t) => {
    const server = await httpServer(t)
    return {
      replace: [['http://service.internal:8080/', `http://localhost:${server.port}/`]],
      check: async (t, { stdout }) => {
        const [requests, lookups] = lines(stdout).map(Number)
        t.equal(requests, 1, 'only fetch went through our dispatcher')
        t.ok(lookups >= 2, 'fetch and http.get both resolved through the cache')
        t.equal(server.bodies.length, 2, 'both requests arrived')
      },
    }
  },
  // A service that reports every 10 s until it is stopped.
  stats: async (t) => {
    const r = await statsdReceiver(t)
    return {
      replace: [["'statsd.internal'", "'127.0.0.1'"], ['8125', String(r.port)], ["'kafka:9092'", `'${await kafkaBroker()}'`]],
      stopOn: () => r.waitFor((x) => x.find('api.dns.entries').length >= 1, 60_000),
      check: async (t) => t.ok(r.find('api.kafka.queued').length >= 1, 'producer stats arrived'),
    }
  },
  // A service stopped by SIGTERM once it serves: the signal drains its clients.
  shutdown: async (t) => {
    const r = await statsdReceiver(t)
    const ingest = await httpServer(t)
    const port = await freePort()
    let order = null
    return {
      replace: [["'statsd.internal'", "'127.0.0.1'"], ['8125', String(r.port)], ["'kafka:9092'", `'${await kafkaBroker()}'`],
        ['http://ingest.internal/events', `http://127.0.0.1:${ingest.port}/events`], ['port: 3000', `port: ${port}`], ["'0.0.0.0'", "'127.0.0.1'"]],
      // Once it serves, an order, then SIGTERM: the handler drains and exits 0.
      stopOn: async (seen) => {
        await seen('serving\n')
        const res = await fetch(`http://127.0.0.1:${port}/orders`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"id":1}' })
        order = res.status
        await res.text()
      },
      check: async (t, { code }) => {
        t.equal(code, 0, 'the handler ended the process with exit code 0')
        t.equal(order, 200, 'the order was answered once its message was acknowledged')
        t.ok(await r.waitFor((x) => x.find('api.orders').length === 1), 'its metric was sent')
        t.same(ingest.bodies.map(String), ['{"type":"order","id":1}\n'], 'its record was delivered')
      },
    }
  },
}

// Runs `file` with node; `stopOn`: a line on stdout, or a promise's
// resolution, after which the child gets SIGTERM.
function runChild (file, { cwd = root, stopOn = null } = {}) {
  return new Promise((resolve) => {
    // As a reader runs it: without the NODE_OPTIONS the test runner gives its
    // children (which silence warnings, and would load its hooks); exec, so
    // the signal reaches node itself.
    const child = spawn('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, file], { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    let stopped = false
    const stop = () => {
      if (stopped) return
      stopped = true
      child.kill('SIGTERM')
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000)
    // seen(text): resolves once the child has printed text.
    const waiting = []
    const seen = (text) => new Promise((resolve) => {
      if (stdout.includes(text)) resolve()
      else waiting.push({ text, resolve })
    })
    child.stdout.on('data', (d) => {
      stdout += d
      if (typeof stopOn === 'string' && stdout.includes(stopOn)) stop()
      for (const w of waiting) if (stdout.includes(w.text)) w.resolve()
    })
    child.stderr.on('data', (d) => { stderr += d })
    if (typeof stopOn === 'function') stopOn(seen).then(stop)
    child.on('exit', (code, signal) => {
      stopped = true
      clearTimeout(timer)
      resolve({ code, signal, stdout, stderr })
    })
  })
}

t.test('every code block of the docs runs as pasted', async (t) => {
  // A reader's project: outside the checkout (coverage and lint never see
  // the blocks), CommonJS, with io-hygiene and the dev dependencies (the
  // blocks' kafkajs, prom-client, OpenTelemetry) installed.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-docs-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'docs-reader', private: true, type: 'commonjs' }))
  fs.mkdirSync(path.join(dir, 'node_modules'))
  for (const name of fs.readdirSync(path.join(root, 'node_modules'))) {
    if (name.startsWith('.') || name === 'io-hygiene') continue
    fs.symlinkSync(path.join(root, 'node_modules', name), path.join(dir, 'node_modules', name), 'dir')
  }
  fs.symlinkSync(root, path.join(dir, 'node_modules', 'io-hygiene'), 'dir')
  const scripts = require('../package.json').scripts
  for (const page of docs) {
    for (const block of codeBlocks(page.text)) await runBlock(t, dir, scripts, page.file, block)
  }
})

async function runBlock (t, dir, scripts, file, block) {
  const at = `${file} line ${block.line}`
  if (block.lang === 'sh') {
    for (const [, script] of block.code.matchAll(/npm run (\S+)/g)) t.ok(scripts[script], `${at}: npm run ${script} exists`)
    for (const [, name] of block.code.matchAll(/node (?:-\S+ \S+ )*((?:examples|bench)\/\S+\.js)/g)) t.ok(fs.existsSync(path.join(root, name)), `${at}: ${name} exists`)
    return
  }
  if (block.lang === 'text') return // output shown to the reader, not code
  // A chart the benchmarks draw (results.md): GitHub renders it; nothing runs.
  if (block.lang === 'mermaid') return t.match(block.code, /^xychart-beta$/m, `${at}: a Mermaid line chart`)
  t.ok(block.lang === 'js' || block.lang === 'mjs', `${at}: a js block, mjs for an ES module (or sh, or text for output, or mermaid for a chart)`)
  await t.test(`the block at ${at}${block.context ? ` (${block.context})` : ''}`, async (t) => {
    const make = CONTEXTS[block.context ?? '']
    t.ok(block.context === null || make, `context ${block.context} is defined`)
    const context = make ? await make(t) : {}
    // Every batcher a block builds is pushed into, as its reader would: a
    // sizeOf that cannot measure the reader's rows fails here.
    for (const [, name] of block.code.matchAll(/const (\w+) = createBatcher\(/g)) {
      t.match(block.code, new RegExp(`\\b${name}\\.push\\(`), `${name} is pushed into`)
    }
    const script = path.join(dir, `${file.replace(/[/.]/g, '-')}-${block.line}.${block.lang}`)
    fs.writeFileSync(script, replaceAll(block.code, context.replace ?? []) + '\n')
    const result = await runChild(script, { cwd: dir, stopOn: context.stopOn })
    if (result.signal !== 'SIGTERM' || !context.stopOn) t.equal(result.code, 0, result.stderr)
    t.notMatch(result.stderr, /IO_HYGIENE_KAFKAJS_NOT_PATCHED/, 'io-hygiene installed before kafkajs loaded')
    await context.check?.(t, result)
  })
}

t.test('the pages: a short README, links that resolve, no run logs', async (t) => {
  const readme = docs[0].text
  t.ok(readme.split('\n').length <= 400, `README.md has ${readme.split('\n').length} lines, at most 400`)
  for (const { file, text } of docs) {
    const prose = text.replace(/^```[\s\S]*?^```$/gm, '')
    t.notMatch(text, /<!-- bench:/, `${file}: no bench markers (nothing reads them)`)
    const hashes = prose.match(/\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b/g) ?? []
    t.same(hashes, [], `${file}: no commit hashes`)
    for (const [, name] of text.matchAll(/<!-- (options:[\w-]+|errors|docs-test: [\w-]+) -->/g)) {
      if (name.startsWith('options:')) t.ok(modules[name.slice(8)], `${file}: ${name} names a module the test checks`)
    }
    for (const [, target] of prose.matchAll(/\]\(((?!https?:|#|mailto:)[^)#\s]+)(?:#[^)]*)?\)/g)) {
      const to = path.join(root, path.dirname(file), target)
      // results.md is written by a full benchmark run, which a checkout may not have had yet.
      if (path.relative(root, to) === path.join('docs', 'benchmarks', 'results.md')) continue
      t.ok(fs.existsSync(to), `${file}: the link to ${target} resolves`)
    }
  }
  for (const page of ['dns', 'http', 'http-sink', 'batch', 'kafka', 'statsd', 'monitor', 'configuration', 'kubernetes', 'errors', 'channels', 'fleet-scale', 'troubleshooting', 'migrating', 'clients', 'benchmarks/README']) {
    t.ok(docs.some((d) => d.file === `docs/${page}.md`), `docs/${page}.md exists`)
    t.match(docs[0].text, `(docs/${page}.md)`, `README links to docs/${page}.md`)
  }
})

t.test('what the pages tell a reader to type works, and agrees from page to page', async (t) => {
  // -r and --import both resolve the bare io-hygiene/register (a file of that
  // exact name: no exports map); one spelling everywhere.
  for (const { file, text } of docs) {
    t.notMatch(text, /(?:-r|--require|--import)[ =]io-hygiene\/register\.js/, `${file}: -r and --import name io-hygiene/register`)
  }
  t.ok(fs.statSync(path.join(root, 'register')).isFile(), 'io-hygiene/register is a file')
  t.notOk(require('../package.json').exports, 'no exports map to refuse it')

  // Not on the registry yet: the README says how else to install, and the
  // repository it names is package.json's.
  const readme = docs[0].text
  const pkg = require('../package.json')
  t.match(readme, `npm install ${pkg.repository.url}`, 'install from the git repository package.json names')
  t.match(readme, /`npm pack`[\s\S]*`npm install \.\/io-hygiene-<version>\.tgz`/, 'or from a packed tarball')

  // Each program the test helpers start is among the README's prerequisites.
  const broker = fs.readFileSync(path.join(__dirname, 'helpers', 'kafka-broker.js'), 'utf8')
  const prerequisites = readme.slice(readme.indexOf('## Benchmarks and tests'))
  if (/execFile\('mvn'/.test(broker)) t.match(prerequisites, /Maven/, 'Maven, which fetches the broker\'s jars')
  t.match(prerequisites, /Java 17/)

  // troubleshooting.md's way to silence kafkajs's TimeoutNegativeWarning
  // silences it, and only it.
  const page = docs.find((d) => d.file === 'docs/troubleshooting.md').text
  const section = page.slice(page.indexOf('## `TimeoutNegativeWarning` from kafkajs'))
  const flag = /`(--disable-warning=TimeoutNegativeWarning)`/.exec(section)?.[1]
  t.ok(flag, 'troubleshooting.md names the flag')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-warning-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const script = path.join(dir, 'negative.js')
  fs.writeFileSync(script, 'setTimeout(() => {}, -1)\nprocess.emitWarning(\'still shown\', { code: \'IO_HYGIENE_TEST\', type: \'IoHygieneWarning\' })\n')
  const run = (args) => new Promise((resolve) => {
    // Without the NODE_OPTIONS the test runner gives its children, which silence warnings.
    require('node:child_process').execFile('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, ...args, script], (error, stdout, stderr) => resolve({ error, stderr }))
  })
  // Node 24 and later warn of a negative delay; 22 makes it 1 ms silently.
  if (Number(process.versions.node.split('.')[0]) >= 24) {
    t.match((await run([])).stderr, /TimeoutNegativeWarning/, 'Node warns of a negative delay')
  }
  const quiet = await run([flag])
  t.notMatch(quiet.stderr, /TimeoutNegativeWarning/, `${flag} hides it`)
  t.match(quiet.stderr, /IoHygieneWarning: still shown/, 'and no other warning')
})

t.test('the package: a LICENSE as package.json says, and the dns example prints what it claims', async (t) => {
  const pkg = require('../package.json')
  t.equal(pkg.license, 'MIT')
  t.match(fs.readFileSync(path.join(root, 'LICENSE'), 'utf8'), /^MIT License\n/)
  const example = path.join(root, 'examples', 'dns.js')
  t.match(fs.readFileSync(example, 'utf8'), /two answers for one name/)
  const { code, stdout } = await runChild(example)
  t.equal(code, 0)
  t.match(stdout, /^201 requests: 2 getaddrinfo calls, 199 cache hits$/m)
  t.match(stdout, /entries: 1\b/, 'one name')
})
