'use strict'

// Every file in examples/ runs as-is with one command (`node examples/X.js`),
// against local servers it starts itself, and exits 0 having printed what it
// shows. New examples are found by listing the folder; their key output line
// belongs in `keyLines` below.
const t = require('tap')
const fs = require('node:fs')
const path = require('node:path')
const { spawn } = require('node:child_process')
const { withWarnings } = require('./helpers/with-warnings')

const root = path.join(__dirname, '..')
const dir = path.join(root, 'examples')
const TIMEOUT_MS = 150_000 // the Kafka example starts a broker

// What each example must print: its key line(s), and a check on the numbers
// it reports where the number is the point.
const keyLines = {
  'dns.js': (t, out) => {
    const m = /^201 requests: (\d+) getaddrinfo calls, (\d+) cache hits$/m.exec(out)
    t.ok(m, 'prints the requests, getaddrinfo calls and cache hits')
    t.ok(Number(m?.[1]) <= 2, `at most 2 getaddrinfo calls for 201 requests (got ${m?.[1]})`)
  },
  'kafka.js': (t, out) => {
    const m = /^5,000 send\(\) calls acknowledged in \d+ ms with (\d+) Produce requests$/m.exec(out)
    t.ok(m, 'prints the sends, their acknowledgement and the Produce requests')
    t.ok(Number(m?.[1]) >= 1 && Number(m?.[1]) <= 100, `batched into at most 100 Produce requests (got ${m?.[1]})`)
    t.match(out, /kafkajsPatch: 'patched'/, 'on the kafkajs io-hygiene corrects: installed before kafkajs loaded')
  },
  'statsd.js': (t, out) => {
    t.match(out, /^receiver: one datagram of \d+ bytes:$/m, 'the receiver got a datagram')
    t.match(out, /^ {2}example\.requests:1\|c\|#service:checkout$/m, 'with the metrics in it')
    t.match(out, /^client counters: /m, 'and the client printed its counters')
  },
  'http.js': (t, out) => {
    const m = /^(\d+) fetches: (\d+) answered 200, (\d+) failed;.*; (\d+) getaddrinfo calls?$/m.exec(out)
    t.ok(m, 'prints the fetches, their answers and the lookups')
    t.equal(m?.[2], m?.[1], 'every fetch was answered 200')
    t.equal(m?.[3], '0', 'none failed')
    t.equal(m?.[4], '1', 'one getaddrinfo call for all of them')
  },
  'monitor.js': (t, out) => {
    t.match(out, /^ALERT .*GetAddrInfoReqWrap/m, 'with the dns module off, the flood raises the alert')
    t.match(out, /install\(\{ dns: true \}\)/, 'and the alert names the fix')
    t.match(out, /=== dns module on ===[^]*^\d+ lookups; no alert$/m, 'with it on, the same flood raises none')
  },
  'register.js': (t, out) => {
    t.match(out, /installed before the app: yes, dns module: on; 200 lookups: 1 getaddrinfo calls in flight/, 'with -r: one getaddrinfo')
    t.match(out, /installed before the app: yes, dns module: off; 200 lookups: \d+ getaddrinfo calls in flight/, 'IO_HYGIENE_DNS=0 turns it off')
    t.match(out, /refused to start \(exit 1\): ERR_IO_HYGIENE_INVALID_ENV/, 'a bad variable stops the start')
    t.notMatch(out, /dns module: off; 200 lookups: 1 getaddrinfo/, 'without the cache the lookups are not merged')
  },
}

function run (file) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [path.join('examples', file)], { cwd: root, env: withWarnings(), stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => { stdout += d })
    child.stderr.on('data', (d) => { stderr += d })
    const timer = setTimeout(() => child.kill('SIGKILL'), TIMEOUT_MS)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, stdout, stderr })
    })
  })
}

const files = fs.readdirSync(dir).filter((f) => f.endsWith('.js')).sort()

t.ok(files.length >= Object.keys(keyLines).length, 'every example with a key line is in the folder')
for (const file of Object.keys(keyLines)) t.ok(files.includes(file), `examples/${file} exists`)

for (const file of files) {
  t.test(`node examples/${file} exits 0 and prints what it shows`, async (t) => {
    const { code, signal, stdout, stderr } = await run(file)
    t.equal(code, 0, `exit 0 (got ${code ?? signal})${code === 0 ? '' : `\n${stderr.slice(-2000)}`}`)
    t.notMatch(stderr, /Error|ERR_/, 'nothing on stderr looks like a failure')
    // Process warnings of a dependency on a newer Node (kafkajs's
    // TimeoutNegativeWarning on Node 24) are shown, not failed.
    for (const warning of stderr.match(/^\(node:\d+\) \w+: .*$/gm) ?? []) t.comment(`examples/${file}: ${warning}`)
    if (keyLines[file]) {
      keyLines[file](t, stdout)
    } else {
      t.comment(`examples/${file} has no key line in test/examples.test.js yet: only its exit code and output are checked`)
      t.ok(stdout.trim().length > 0, 'it prints something')
    }
  })
}

t.test('the walkthrough names every example, in the folder', async (t) => {
  const readme = fs.readFileSync(path.join(dir, 'README.md'), 'utf8')
  for (const file of files) t.match(readme, `node examples/${file}`, `examples/README.md shows how to run ${file}`)
})
