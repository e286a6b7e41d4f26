'use strict'

const t = require('tap')
const dns = require('node:dns')
const fs = require('node:fs')
const path = require('node:path')
const util = require('node:util')
const { execFile } = require('node:child_process')
const ioHygiene = require('..')
const { modules, ALREADY_INSTALLED } = require('../lib/install')
const { integer, oneOf, func, nullable } = require('../lib/core/options')
const { optionsFromEnv, envName, knownVariables, distance } = require('../lib/env')
const { currentCache } = require('../lib/dns')

const originalLookup = dns.lookup
const originalPromise = dns.promises.lookup

t.afterEach(() => ioHygiene.uninstall())

t.test('install() patches dns.lookup and returns a handle; uninstall() restores it', async (t) => {
  const handle = ioHygiene.install()
  t.not(dns.lookup, originalLookup)
  t.not(dns.promises.lookup, originalPromise)
  t.equal(ioHygiene.installed(), handle)
  t.type(handle.dns.stats, 'function')
  const answer = await util.promisify(dns.lookup)('localhost', { family: 4 })
  t.same(answer, { address: '127.0.0.1', family: 4 })
  t.equal(handle.uninstall(), true)
  t.equal(dns.lookup, originalLookup)
  t.equal(dns.promises.lookup, originalPromise)
  t.equal(ioHygiene.installed(), null)
  t.equal(ioHygiene.uninstall(), true, 'a second uninstall is a no-op')
})

// The io-hygiene warnings emitted while `fn` runs (they are emitted on the next tick).
async function warningsOf (fn) {
  const seen = []
  const listener = (w) => { if (w.code === ALREADY_INSTALLED) seen.push(w) }
  process.on('warning', listener)
  try {
    fn()
    await new Promise(setImmediate)
  } finally {
    process.removeListener('warning', listener)
  }
  return seen
}

t.test('a second install() returns the installation in place; different options warn once, never throw', async (t) => {
  const a = ioHygiene.install({ dns: { maxTtlMs: 5000 } })
  t.same(await warningsOf(() => t.equal(ioHygiene.install({ dns: { maxTtlMs: 5000 } }), a)), [], 'same options: silent')
  const [warning, ...more] = await warningsOf(() => {
    t.equal(ioHygiene.install({ dns: { maxTtlMs: 6000 } }), a)
    t.equal(ioHygiene.install({ dns: { maxTtlMs: 6000 } }), a)
  })
  t.same(more, [], 'one warning for the same ignored options')
  t.match(warning, { code: 'IO_HYGIENE_ALREADY_INSTALLED', name: 'IoHygieneWarning' })
  t.match(warning.message, /already installed by an earlier install\(\).*ignored: dns\.maxTtlMs \(asked 6000, in use 5000\)/)
  const [off] = await warningsOf(() => t.equal(ioHygiene.install({ dns: false }), a))
  t.match(off.message, /ignored: dns \(asked off, in use on\)/)
  t.equal(a.options.dns.maxTtlMs, 5000, 'the installation is unchanged')
  t.throws(() => ioHygiene.install({ dns: { maxTTL: 1 } }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION' }, 'bad options still throw')
  ioHygiene.uninstall()
  const b = ioHygiene.install({ dns: { servers: ['127.0.0.1:53'] } })
  t.same(await warningsOf(() => ioHygiene.install({ dns: { servers: ['127.0.0.1:53'] } })), [], 'equal arrays are the same options')
  const [servers] = await warningsOf(() => t.equal(ioHygiene.install({ dns: { servers: ['127.0.0.2:53'] } }), b))
  t.match(servers.message, /dns\.servers \(asked \["127\.0\.0\.2:53"\], in use \["127\.0\.0\.1:53"\]\)/)
  ioHygiene.uninstall()
  const c = ioHygiene.install({ dns: true })
  t.same(await warningsOf(() => t.equal(ioHygiene.install(), c)), [], 'true and the defaults are the same options')
  ioHygiene.uninstall()
  const none = ioHygiene.install({ dns: false })
  t.same(await warningsOf(() => t.equal(ioHygiene.install({ dns: false }), none)), [])
  const [on] = await warningsOf(() => t.equal(ioHygiene.install(), none))
  t.match(on.message, /ignored: dns \(asked on, in use off\)/)
})

t.test('a module that fails to apply undoes the ones applied before it', async (t) => {
  const failing = {
    name: 'failing',
    enabledByDefault: true,
    spec: () => ({}),
    apply: () => { throw new Error('cannot apply') },
  }
  modules.push(failing)
  t.teardown(() => modules.splice(modules.indexOf(failing), 1))
  t.throws(() => ioHygiene.install(), { message: 'cannot apply' })
  t.equal(dns.lookup, originalLookup, 'dns was applied, then undone')
  t.equal(dns.promises.lookup, originalPromise)
  t.equal(ioHygiene.installed(), null)
})

t.test('bad options throw before anything is touched', async (t) => {
  t.throws(() => ioHygiene.install({ dsn: {} }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /unknown option "dsn"/ })
  t.throws(() => ioHygiene.install({ dns: { maxTTL: 1 } }), { code: 'ERR_IO_HYGIENE_UNKNOWN_OPTION', message: /maxTtlMs/ })
  t.throws(() => ioHygiene.install({ dns: 'yes' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => ioHygiene.install({ dns: [] }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => ioHygiene.install('dns'), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  t.throws(() => ioHygiene.install({ dns: { minTtlMs: 10, maxTtlMs: 1 } }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', message: /^install\(\{ dns \}\): minTtlMs/ })
  t.equal(dns.lookup, originalLookup)
  t.equal(ioHygiene.installed(), null)
})

t.test('dns: false installs nothing', async (t) => {
  const handle = ioHygiene.install({ dns: false })
  t.teardown(() => handle.uninstall())
  t.equal(handle.dns, null)
  t.equal(dns.lookup, originalLookup)
  t.equal(currentCache(), null, 'no cache serves dns.lookup')
})

// statsd and the monitor ask the dns feature, not install.js, which cache answers now.
t.test('currentCache() is the installed cache only while it is installed', async (t) => {
  t.equal(currentCache(), null, 'before install()')
  const handle = ioHygiene.install()
  t.equal(currentCache(), handle.dns, 'after install()')
  handle.uninstall()
  t.equal(currentCache(), null, 'after uninstall()')
})

t.test('someone patching after us keeps their wrapper; ours then passes through', async (t) => {
  const handle = ioHygiene.install()
  const ours = dns.lookup
  const seen = []
  dns.lookup = function theirs (hostname, options, callback) {
    seen.push(hostname)
    return ours.call(this, hostname, options, callback)
  }
  t.equal(ioHygiene.uninstall(), false, 'not fully restored')
  t.equal(dns.lookup.name, 'theirs')
  t.equal(dns.promises.lookup, originalPromise)
  const answer = await new Promise((resolve, reject) => dns.lookup('localhost', { family: 4 }, (err, address) => err ? reject(err) : resolve(address)))
  t.equal(answer, '127.0.0.1')
  t.same(seen, ['localhost'])
  t.equal(handle.dns.stats().misses, 0, 'the closed cache was not asked')
  dns.lookup = originalLookup
})

t.test('a wrapper installed before install() stays in the chain for what the cache does not take', async (t) => {
  const seen = []
  dns.lookup = function apm (hostname, options, callback) {
    seen.push(hostname)
    return originalLookup.call(this, hostname, options, callback)
  }
  t.teardown(() => { dns.lookup = originalLookup })
  ioHygiene.install()
  await new Promise((resolve) => dns.lookup('127.0.0.1', resolve))
  await new Promise((resolve) => dns.lookup('localhost', { family: 4 }, resolve))
  t.same(seen, ['127.0.0.1', 'localhost'], 'the IP literal and the miss went through it')
  ioHygiene.uninstall()
  t.equal(dns.lookup.name, 'apm')
})

t.test('a second copy of io-hygiene sees the first one', async (t) => {
  const first = ioHygiene.install()
  const copyPath = require.resolve('..')
  const cached = Object.keys(require.cache).filter((k) => k.startsWith(require('node:path').dirname(copyPath) + '/lib') || k === copyPath)
  const saved = cached.map((k) => [k, require.cache[k]])
  for (const k of cached) delete require.cache[k]
  const second = require('..')
  for (const [k, v] of saved) require.cache[k] = v
  t.not(second, ioHygiene, 'a separate copy')
  t.equal(second.installed(), first, 'it finds the installed handle')
  const { originalOf } = require('../lib/core/global-slot')
  t.equal(originalOf(dns.lookup), originalLookup)
})

t.test('IO_HYGIENE_* variables become install() options', async (t) => {
  t.ok(knownVariables(modules).has('IO_HYGIENE_DNS_MAX_TTL_MS'), 'the names come from the module specs')
  t.equal(envName('dns', 'maxTtlMs'), 'IO_HYGIENE_DNS_MAX_TTL_MS')
  t.same(optionsFromEnv(modules, {}), {})
  t.same(optionsFromEnv(modules, { IO_HYGIENE_DNS: '1' }), { dns: {} })
  t.same(optionsFromEnv(modules, { IO_HYGIENE_DNS: 'false', IO_HYGIENE_DNS_MAX_TTL_MS: '5' }), { dns: false })
  t.same(optionsFromEnv(modules, {
    IO_HYGIENE_DNS_MAX_TTL_MS: '5000',
    IO_HYGIENE_DNS_SERVERS: '127.0.0.1:5353, 127.0.0.2',
    IO_HYGIENE_DNS_HOSTS_FILE: '',
  }), { dns: { maxTtlMs: 5000, servers: ['127.0.0.1:5353', '127.0.0.2'], hostsFile: null } })
  t.same(optionsFromEnv(modules, { IO_HYGIENE_DNS_SERVERS: '' }), { dns: { servers: null } })
  t.same(optionsFromEnv(modules, { IO_HYGIENE_DNS_HOSTS_FILE: '/tmp/hosts' }), { dns: { hostsFile: '/tmp/hosts' } })
  t.throws(() => optionsFromEnv(modules, { IO_HYGIENE_DNS_MAX_TTL_MS: '5s' }), { code: 'ERR_IO_HYGIENE_INVALID_ENV', message: /IO_HYGIENE_DNS_MAX_TTL_MS/ })
  t.throws(() => optionsFromEnv(modules, { IO_HYGIENE_DNS: 'maybe' }), { code: 'ERR_IO_HYGIENE_INVALID_ENV' })
})

t.test('a new module\'s options get variables; functions and objects do not', async (t) => {
  const extra = {
    name: 'extra',
    enabledByDefault: false,
    spec: () => ({
      sampleRate: { default: 1, check: { expects: 'number' } },
      windowMs: { default: null, check: nullable(integer()) },
      mode: { default: 'a', check: oneOf('a', 'b') },
      onEvent: { default: null, check: nullable(func()) },
    }),
    apply: () => ({ value: 'extra', undo () {} }),
  }
  const known = [...knownVariables([extra]).keys()]
  t.same(known, ['IO_HYGIENE_EXTRA', 'IO_HYGIENE_EXTRA_SAMPLE_RATE', 'IO_HYGIENE_EXTRA_WINDOW_MS', 'IO_HYGIENE_EXTRA_MODE'])
  t.same(optionsFromEnv([extra], { IO_HYGIENE_EXTRA_SAMPLE_RATE: '0.5', IO_HYGIENE_EXTRA_WINDOW_MS: '', IO_HYGIENE_EXTRA_MODE: 'b' }),
    { extra: { sampleRate: 0.5, windowMs: null, mode: 'b' } })
  t.throws(() => optionsFromEnv([extra], { IO_HYGIENE_EXTRA_SAMPLE_RATE: 'half' }), { code: 'ERR_IO_HYGIENE_INVALID_ENV', message: /IO_HYGIENE_EXTRA_SAMPLE_RATE must be a number/ })
  t.throws(() => optionsFromEnv([extra], { IO_HYGIENE_EXTRA_ON_EVENT: 'x' }), {
    code: 'ERR_IO_HYGIENE_UNKNOWN_ENV',
    message: 'environment variable IO_HYGIENE_EXTRA_ON_EVENT cannot be read: the extra option "onEvent" takes a value no environment variable can carry (an object or a function); pass it in code: install({ extra: { onEvent } })',
  }, 'an option no variable can carry says so, with no "did you mean"')
  t.same(optionsFromEnv([extra], { IO_HYGIENE_EXTRA: '1', IO_HYGIENE_EXTRA_MODE: 'b' }), { extra: { mode: 'b' } })
  t.same(optionsFromEnv([extra], { IO_HYGIENE_EXTRA_MODE: 'b', IO_HYGIENE_EXTRA: '0' }), { extra: false }, 'off wins')
})

t.test('an ignored function option is named without printing the function', async (t) => {
  const withHook = {
    name: 'hooked',
    enabledByDefault: false,
    spec: () => ({ onEvent: { default: null, check: nullable(func()) } }),
    apply: () => ({ value: 'hooked', undo () {} }),
  }
  modules.push(withHook)
  t.teardown(() => modules.splice(modules.indexOf(withHook), 1))
  ioHygiene.install({ hooked: { onEvent: () => {} } })
  const [warning] = await warningsOf(() => ioHygiene.install({ hooked: { onEvent: () => {} } }))
  t.match(warning.message, /hooked\.onEvent \(asked a function, in use a function\)/)
})

t.test('an ignored option is described by its type, never printed: objects, circular ones, long strings', async (t) => {
  const any = (where, key, value) => value
  const keys = ['circular', 'bigint', 'long', 'short', 'numbers', 'objects', 'longArray', 'flag']
  const described = {
    name: 'described',
    enabledByDefault: false,
    spec: () => Object.fromEntries(keys.map((k) => [k, { default: null, check: any }])),
    apply: () => ({ value: 'described', undo () {} }),
  }
  modules.push(described)
  t.teardown(() => modules.splice(modules.indexOf(described), 1))
  ioHygiene.install({ described: true })
  const circular = { token: 'secret-token' }
  circular.self = circular
  const asked = {
    circular,
    bigint: 5n,
    long: 'x'.repeat(81),
    short: 'on',
    numbers: [1, 2],
    objects: [{ token: 'secret-token' }],
    longArray: Array.from({ length: 40 }, (_, i) => i),
    flag: false,
  }
  const [warning] = await warningsOf(() => t.doesNotThrow(() => ioHygiene.install({ described: asked })))
  t.match(warning.message, 'described.circular (asked an object, in use null)')
  t.match(warning.message, 'described.bigint (asked 5n, in use null)')
  t.match(warning.message, 'described.long (asked a string, in use null)')
  t.match(warning.message, 'described.short (asked "on", in use null)')
  t.match(warning.message, 'described.numbers (asked [1,2], in use null)')
  t.match(warning.message, 'described.objects (asked an array, in use null)')
  t.match(warning.message, 'described.longArray (asked an array, in use null)')
  t.match(warning.message, 'described.flag (asked false, in use null)')
  t.notMatch(warning.message, /secret-token/, 'no object\'s insides')
})

t.test('an ignored option\'s text is escaped, and a revoked proxy is described, never touched', async (t) => {
  const any = (where, key, value) => value
  const hostile = {
    name: 'hostile',
    enabledByDefault: false,
    spec: () => ({ text: { default: null, check: any }, proxy: { default: null, check: any } }),
    apply: () => ({ value: 'hostile', undo () {} }),
  }
  modules.push(hostile)
  t.teardown(() => modules.splice(modules.indexOf(hostile), 1))
  const { proxy, revoke } = Proxy.revocable([], {})
  ioHygiene.install({ hostile: { proxy } })
  revoke() // in use, and now throws at every touch (Array.isArray included)
  const [warning] = await warningsOf(() => t.doesNotThrow(() => ioHygiene.install({ hostile: { text: 'a\u2028b\u202ec\u0085', proxy: [] } })))
  t.match(warning.message, 'hostile.text (asked "a\\u2028b\\u202ec\\u0085", in use null)', 'line separators and overrides escaped')
  t.match(warning.message, 'hostile.proxy (asked [], in use an object)')
})

t.test('a misspelt variable is refused with the closest known name', async (t) => {
  const refused = {
    IO_HYGIENE_DNS_MAX_TTL: 'IO_HYGIENE_DNS_MAX_TTL_MS',
    IO_HYGIENE_DNS_MAXTTLMS: 'IO_HYGIENE_DNS_MAX_TTL_MS',
    IO_HYGEINE_DNS: 'IO_HYGIENE_DNS',
    IOHYGIENE_DNS_SERVERS: 'IO_HYGIENE_DNS_SERVERS',
    io_hygiene_dns_hosts_file: 'IO_HYGIENE_DNS_HOSTS_FILE',
    IO_HYGIENE_DSN: 'IO_HYGIENE_DNS',
    IO_XYGIEXE_MONITOR: 'IO_HYGIENE_MONITOR', // two edits leave two of H, Y, G and N
  }
  for (const [name, closest] of Object.entries(refused)) {
    t.throws(() => optionsFromEnv(modules, { [name]: '1' }), {
      code: 'ERR_IO_HYGIENE_UNKNOWN_ENV',
      name: 'TypeError',
      message: `unknown environment variable ${name} (did you mean ${closest}?`,
    }, name)
  }
  const unrelated = { PATH: '/bin', HYGIENE: '1', IO_HYGIENE_TEST_NAMESPACE: '1', IO_HYGIENE_BENCH_NAMESERVER: 'x', NODE_OPTIONS: '' }
  t.same(optionsFromEnv(modules, unrelated), {}, 'other names, and the project\'s own test and bench variables, pass')
  t.equal(distance('HYGEINE', 'HYGIENE'), 1, 'a swap is one edit')
  t.equal(distance('', 'ab'), 2)
})

t.test('the environment wins over code for what it sets; code fills the rest', async (t) => {
  const saved = { ...process.env }
  t.teardown(() => {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key]
  })
  process.env.IO_HYGIENE_DNS_MAX_TTL_MS = '5000'
  const handle = ioHygiene.install({ dns: { maxTtlMs: 1000, minTtlMs: 500 } })
  t.match(handle.options.dns, { maxTtlMs: 5000, minTtlMs: 500 })
  ioHygiene.uninstall()
  t.match(ioHygiene.install({ dns: false }).options, { dns: { maxTtlMs: 5000 } }, 'a variable of a module turns it on')
  ioHygiene.uninstall()
  process.env.IO_HYGIENE_DNS = '0'
  t.equal(ioHygiene.install({ dns: { maxTtlMs: 1000 } }).options.dns, false, 'IO_HYGIENE_DNS=0 turns it off')
  ioHygiene.uninstall()
  for (const asked of [undefined, true, {}]) {
    t.equal(ioHygiene.install({ kafkajs: asked, dns: false, http: false }).options.kafkajs, true, `kafkajs: ${JSON.stringify(asked)} is true, as docs/configuration.md lists it`)
    ioHygiene.uninstall()
  }
  t.equal(ioHygiene.install({ kafkajs: false, dns: false, http: false }).options.kafkajs, false)
  ioHygiene.uninstall()
  delete process.env.IO_HYGIENE_DNS
  process.env.IO_HYGIENE_DNS_MAX_TTL_MS = '0'
  t.throws(() => ioHygiene.install(), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', message: /IO_HYGIENE_DNS_MAX_TTL_MS=0/ })
  delete process.env.IO_HYGIENE_DNS_MAX_TTL_MS
  process.env.IO_HYGIENE_DNS_SERVERS = 'not-an-ip'
  t.throws(() => ioHygiene.install(), {
    code: 'ERR_IO_HYGIENE_INVALID_OPTION',
    message: /^install\(\{ dns \}\) with IO_HYGIENE_DNS_SERVERS=not-an-ip: .*got \["not-an-ip"\] \(Invalid IP address: not-an-ip\)$/,
  })
  t.equal(ioHygiene.installed(), null)
})

// A child's environment: none of ours but the variables given (tap's own are kept).
function childEnv (env = {}) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^io_?hyg/i.test(k)))
  return { ...base, ...env }
}

// A child process with only the variables given.
function run (args, env = {}) {
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: path.join(__dirname, '..'), env: childEnv(env) }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, out: stdout.trim() ? JSON.parse(stdout) : null, stderr })
    })
  })
}

const app = path.join(__dirname, 'fixtures', 'install-app.js')
const register = require.resolve('../register.js')

t.test('node -r io-hygiene/register, then install() in the code: never a crash', async (t) => {
  const off = await run(['-r', register, app, '{}'], { IO_HYGIENE_DNS: '0' })
  t.equal(off.code, 0, off.stderr)
  t.match(off.out, { before: true, same: true, options: { dns: false }, warnings: [] })

  const set = await run(['-r', register, app, '{"dns":{"maxTtlMs":1000}}'], { IO_HYGIENE_DNS_MAX_TTL_MS: '5000' })
  t.equal(set.code, 0, set.stderr)
  t.match(set.out, { same: true, options: { dns: { maxTtlMs: 5000 } }, warnings: [] }, 'the environment won; nothing ignored')

  const more = await run(['-r', register, app, '{"dns":{"minTtlMs":500,"maxTtlMs":1000}}'], { IO_HYGIENE_DNS_MAX_TTL_MS: '5000' })
  t.equal(more.code, 0, more.stderr)
  t.match(more.out, { same: true, options: { dns: { maxTtlMs: 5000, minTtlMs: 1000 } } })
  t.equal(more.out.warnings.length, 1, 'one warning')
  t.match(more.out.warnings[0], { code: 'IO_HYGIENE_ALREADY_INSTALLED', message: /installed by node -r io-hygiene\/register.*ignored: dns\.minTtlMs \(asked 500, in use 1000\)\./ })
  t.notMatch(more.out.warnings[0].message, /maxTtlMs/, 'what the environment set is not reported as ignored')

  const code = await run([app, '{"dns":{"minTtlMs":500,"maxTtlMs":1000}}'], { IO_HYGIENE_DNS_MAX_TTL_MS: '5000' })
  t.match(code.out, { before: false, options: { dns: { maxTtlMs: 5000, minTtlMs: 500 } }, warnings: [] }, 'without -r: the same precedence')
})

t.test('node --import io-hygiene/register.js runs before an ES module\'s hoisted imports', async (t) => {
  const esm = await run(['--import', 'io-hygiene/register.js', path.join(__dirname, 'fixtures', 'install-app.mjs')], { IO_HYGIENE_DNS_MAX_TTL_MS: '7000' })
  t.equal(esm.code, 0, esm.stderr)
  t.match(esm.out, { before: true, options: { dns: { maxTtlMs: 7000 } } })
})

t.test('an IO_HYGIENE_* name that is no near miss is ignored with one warning: a rollback still starts', async (t) => {
  // Without the test runner's hooks, whose loader thread runs -r once more.
  const child = await new Promise((resolve) => {
    execFile('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, '-r', register, app, '{}'],
      { cwd: path.join(__dirname, '..'), env: childEnv({ IO_HYGIENE_VERSION: '0.1.0', IO_HYGIENE_DNS_NEW_KNOB_IN_V2: 'x' }) },
      (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stderr }))
  })
  t.equal(child.code, 0, child.stderr)
  // Printed by Node on stderr (a warning emitted during -r may come before the app listens).
  const unknown = child.stderr.split('\n').filter((line) => line.includes('[IO_HYGIENE_UNKNOWN_ENV]'))
  t.same(unknown.map((line) => line.match(/IoHygieneWarning: (\S+)/)[1]).sort(), ['IO_HYGIENE_DNS_NEW_KNOB_IN_V2', 'IO_HYGIENE_VERSION'],
    'one warning each, though the environment was read twice (-r, then install())')
  t.match(unknown[0], /is not a variable this version of io-hygiene reads; it is ignored/)
  const nearMiss = await run(['-r', register, app, '{}'], { IO_HYGIENE_VERSION: '0.1.0', IO_HYGIENE_MONITOR_INTERVAL: '5' })
  t.equal(nearMiss.code, 1, 'a near miss still fails')
  t.match(nearMiss.stderr, /IO_HYGIENE_MONITOR_INTERVAL \(did you mean IO_HYGIENE_MONITOR_INTERVAL_MS\?/)
})

t.test('an unknown variable that is no near miss warns once per name, in this process too', async (t) => {
  const seen = []
  const listener = (w) => { if (w.code === 'IO_HYGIENE_UNKNOWN_ENV') seen.push(w.message) }
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  const env = { IO_HYGIENE_SOMETHING_ELSE_ENTIRELY: '1' }
  t.same(optionsFromEnv(modules, env), {})
  t.same(optionsFromEnv(modules, env), {})
  await new Promise(setImmediate)
  t.same(seen, ['IO_HYGIENE_SOMETHING_ELSE_ENTIRELY is not a variable this version of io-hygiene reads; it is ignored ' +
    '(a variable of a newer version, or of another tool: rename it if it is neither)'])
})

t.test('a variable\'s name and value are shown escaped: a newline forges no line, an escape drives no terminal', async (t) => {
  const seen = []
  const listener = (w) => { if (w.code === 'IO_HYGIENE_UNKNOWN_ENV') seen.push(w.message) }
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  optionsFromEnv(modules, { 'IO_HYGIENE_SOMETHING_ELSE\u001b[2J\n(node:1) forged': '1' })
  await new Promise(setImmediate)
  t.match(seen, [/^IO_HYGIENE_SOMETHING_ELSE\\u001b\[2J\\u000a\(node:1\) forged is not a variable/], 'the warning')
  t.throws(() => optionsFromEnv(modules, { 'IO_HYGIENE_DNS_MAX_TTL\n': '5' }), { message: /^unknown environment variable IO_HYGIENE_DNS_MAX_TTL\\u000a \(did you mean/ }, 'a near miss')
  t.throws(() => optionsFromEnv(modules, { IO_HYGIENE_DNS_MAX_TTL_MS: '5\u202e\u2028' }), { message: /got "5\\u202e\\u2028"$/ }, 'a refused value')
})

t.test('a misspelt or invalid variable fails start-up, naming it', async (t) => {
  for (const [name, value, message] of [
    ['IO_HYGIENE_DNS_MAX_TTL', '60000', /ERR_IO_HYGIENE_UNKNOWN_ENV.*IO_HYGIENE_DNS_MAX_TTL \(did you mean IO_HYGIENE_DNS_MAX_TTL_MS\?/],
    ['IO_HYGIENE_DNS_MAXTTLMS', '60000', /IO_HYGIENE_DNS_MAXTTLMS \(did you mean IO_HYGIENE_DNS_MAX_TTL_MS\?/],
    ['IO_HYGEINE_DNS', '0', /IO_HYGEINE_DNS \(did you mean IO_HYGIENE_DNS\?/],
    ['IO_HYGIENE_MONITOR_LOGGER', 'console', /IO_HYGIENE_MONITOR_LOGGER cannot be read: the monitor option "logger" takes a value no environment variable can carry .*install\(\{ monitor: \{ logger \} \}\)/],
    ['IO_HYGIENE_DNS_MAX_TTL_MS', '0', /ERR_IO_HYGIENE_CONFLICTING_OPTIONS.*IO_HYGIENE_DNS_MAX_TTL_MS=0: minTtlMs \(1000\) must not exceed maxTtlMs \(0\)/],
    ['IO_HYGIENE_DNS_SERVERS', 'not-an-ip', /IO_HYGIENE_DNS_SERVERS=not-an-ip: .*\(Invalid IP address: not-an-ip\)/],
  ]) {
    const child = await run(['-r', register, app], { [name]: value })
    t.equal(child.code, 1, `${name}=${value} fails`)
    t.match(child.stderr, message)
  }
})

// What a process loads at start is what it pays for at start (bench/overhead.js
// `startup`): install() with the defaults loads the dns patch and the http
// slot, and nothing a first lookup or another module would load on its own.
t.test('install() loads only what its modules need before their first use', async (t) => {
  // Builtins are counted as io-hygiene's own files ask for them: the test
  // runner's hooks in the child load node:net themselves.
  const script = `
    const path = require('node:path')
    const Module = require('node:module')
    const root = process.cwd()
    const asked = new Set()
    const load = Module._load
    Module._load = function (request, parent, isMain) {
      if (parent && parent.filename.startsWith(root) && !parent.filename.includes('node_modules') && Module.isBuiltin(request)) asked.add(request.replace('node:', ''))
      return load.apply(this, arguments)
    }
    const loaded = () => ({
      files: Object.keys(require.cache).filter((f) => !f.includes('node_modules')).map((f) => path.relative(root, f)).concat(
        Object.keys(require.cache).filter((f) => f.includes('node_modules')).map((f) => f.split('node_modules/')[1].split('/')[0])),
      builtins: [...asked],
    })
    require('io-hygiene').install()
    const atStart = loaded()
    let idle = null
    process.once('beforeExit', () => {
      idle = loaded()
      require('node:dns').lookup('localhost', { family: 4 }, (err, address) => {
        process.stdout.write(JSON.stringify({ atStart, idle, address, err: err && err.code, afterLookup: loaded() }))
      })
    })
  `
  const { code, out, stderr } = await run(['-e', script])
  t.equal(code, 0, stderr)
  const later = ['lib/env.js', 'lru-cache', 'undici', 'lib/dns/upstream.js', 'lib/dns/hosts.js', 'lib/dns/ip.js', 'lib/dns/expiry.js', 'lib/monitor/index.js', 'lib/metrics/registry.js',
    'lib/batch/batcher.js', 'lib/kafka/index.js', 'lib/statsd/index.js', 'lib/statsd/options.js', 'lib/statsd/client-state.js', 'lib/statsd/host-lookup.js', 'lib/http/sink.js', 'lib/http/agent.js', 'lib/core/diagnostics.js', 'lib/core/errors.js']
  for (const when of ['atStart', 'idle']) {
    for (const file of later) t.notOk(out[when].files.includes(file), `${when}: ${file} not loaded`)
    // node:util: only the http feature's check of an Agent already in the slot reads it.
    for (const builtin of ['net', 'dgram', 'diagnostics_channel', 'util']) t.notOk(out[when].builtins.includes(builtin), `${when}: node:${builtin} not asked for`)
    t.notOk(out[when].files.includes('@opentelemetry'), `${when}: no @opentelemetry module`)
  }
  for (const file of ['lib/dns/cache.js', 'lib/dns/lookup.js']) t.notOk(out.atStart.files.includes(file), `atStart: ${file} waits for the first lookup`)
  t.ok(out.atStart.builtins.includes('dns'), 'node:dns is asked for, to be patched')
  t.equal(out.address, '127.0.0.1', 'the first lookup answers')
  for (const file of ['lib/dns/cache.js', 'lib/dns/lookup.js', 'lru-cache', 'lib/dns/upstream.js', 'lib/dns/ip.js', 'lib/core/diagnostics.js']) t.ok(out.afterLookup.files.includes(file), `${file} loaded by the first lookup`)
  for (const builtin of ['net', 'diagnostics_channel']) t.ok(out.afterLookup.builtins.includes(builtin), `node:${builtin}, by the first lookup`)
  t.notOk(out.afterLookup.files.includes('@opentelemetry'), 'nor any @opentelemetry module after it')
})

// dns.lookup and dns.promises.lookup are patched at install() with stand-ins
// that make the cache at their first call: each looks as the function it
// replaces does, before and after that call, and options are still refused
// by install(), not by the first lookup.
t.test('the patched lookups look like the originals before the cache is made', async (t) => {
  const script = `
    const dns = require('node:dns')
    const util = require('node:util')
    const shape = (fn) => ({ name: fn.name, length: fn.length, keys: Reflect.ownKeys(fn).map(String), promisified: util.promisify(fn).name })
    const before = [shape(dns.lookup), shape(dns.promises.lookup)]
    const { install } = require('io-hygiene')
    let refused = null
    try { install({ dns: { minTtlMs: 5000, maxTtlMs: 1000 } }) } catch (err) { refused = err.code }
    const handle = install()
    const patched = [shape(dns.lookup), shape(dns.promises.lookup)]
    const loaded = () => Object.keys(require.cache).some((f) => f.endsWith('lib/dns/cache.js'))
    const atInstall = loaded()
    util.promisify(dns.lookup)('localhost', { family: 4 }).then(async (answer) => {
      const second = await dns.promises.lookup('localhost', { family: 4 })
      process.stdout.write(JSON.stringify({ before, patched, refused, atInstall, afterLookup: loaded(), answer, second, stats: handle.dns.stats(), after: [shape(dns.lookup), shape(dns.promises.lookup)] }))
    })
  `
  const { code, out, stderr } = await run(['-e', script])
  t.equal(code, 0, stderr)
  t.equal(out.refused, 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', 'a conflict is refused by install()')
  t.same(out.patched, out.before, 'name, length, own keys (the promisify symbol) as the originals\'')
  t.same(out.after, out.before, 'and the same after the first lookup')
  t.equal(out.atInstall, false, 'no cache at install()')
  t.equal(out.afterLookup, true, 'the first lookup made it')
  t.same(out.answer, { address: '127.0.0.1', family: 4 }, 'util.promisify(dns.lookup) resolves as Node\'s')
  t.same(out.second, { address: '127.0.0.1', family: 4 })
  t.equal(out.stats.misses, 1, 'the first lookup was the cache\'s')
  t.equal(out.stats.hits, 1, 'and dns.promises.lookup answered from the same cache')
})

// Each file a process loads at start costs it a fraction of a millisecond
// however small the file (bench/overhead.js `startup`): the files install()
// and -r io-hygiene/register load before any first use are these, and a
// file added to them is a decision, not a drift.
t.test('install() and -r io-hygiene/register load exactly the start-up files', async (t) => {
  // The dns cache (lib/dns/cache.js, lib/dns/lookup.js) loads at the first
  // lookup; lib/core/timers.js with the first feature that waits (the real
  // timers are read by lib/core/global-slot.js).
  const features = ['lib/install.js', 'lib/core/global-slot.js',
    'lib/kafka/kafkajs-patch.js', 'lib/dns/index.js', 'lib/http/index.js']
  // Our own files in require.cache, after `first` has run.
  const listing = (first) => `
    ${first}
    const path = require('node:path')
    const own = Object.keys(require.cache).filter((f) => !f.includes('node_modules')).map((f) => path.relative(process.cwd(), f))
    process.stdout.write(JSON.stringify(own.sort()))
  `
  const code = await run(['-e', listing("require('io-hygiene').install()")])
  t.equal(code.code, 0, code.stderr)
  t.same(code.out, ['index.js', ...features].sort(), 'install()')
  const preloaded = await run(['-r', 'io-hygiene/register', '-e', listing('')])
  t.equal(preloaded.code, 0, preloaded.stderr)
  t.same(preloaded.out, ['register', ...features].sort(), '-r io-hygiene/register: one entry file, not two')

  // register.js and register are twins: the same code, each on its own.
  const codeOf = (file) => fs.readFileSync(path.join(__dirname, '..', file), 'utf8').split('\n').filter((line) => line.trim() !== '' && !line.startsWith('//'))
  t.same(codeOf('register'), codeOf('register.js'), 'register and register.js run the same code')
})

// What a start with the defaults never runs stays out of start-up, and each
// piece loads when it is first needed: options are checked when given or
// read, our Agent is made at the first read of undici's slot, the kafkajs
// files are checked when kafkajs loads. A file moved back into the start-up
// path makes this fail by name.
t.test('cold code stays out of start-up, and loads at its first use', async (t) => {
  const cold = ['lib/core/options.js', 'lib/install-options.js', 'lib/dns/options.js', 'lib/http/options.js', 'lib/http/global-dispatcher.js',
    'lib/kafka/kafkajs-known.js', 'lib/core/errors.js', 'lib/env.js']
  const script = (first) => `
    ${first}
    const path = require('node:path')
    const loaded = () => Object.keys(require.cache).filter((f) => !f.includes('node_modules')).map((f) => path.relative(process.cwd(), f))
    const atStart = loaded()
    const handle = require('io-hygiene').installed()
    const options = JSON.stringify(handle.options)
    const afterOptions = loaded()
    globalThis[Symbol.for('undici.globalDispatcher.2')]
    const afterSlot = loaded()
    require('kafkajs').Kafka
    process.stdout.write(JSON.stringify({ atStart, options: JSON.parse(options), afterOptions, afterSlot, afterKafkajs: loaded() }))
  `
  for (const [how, args] of [['install()', ['-e', script("require('io-hygiene').install()")]], ['-r io-hygiene/register', ['-r', 'io-hygiene/register', '-e', script('')]]]) {
    const { code, out, stderr } = await run(args)
    t.equal(code, 0, stderr)
    for (const file of cold) t.notOk(out.atStart.includes(file), `${how}: ${file} is not loaded at start`)
    t.match(out.options, { kafkajs: true, dns: { maxTtlMs: 300_000 }, http: { connections: 128 }, monitor: false }, `${how}: the options read are the defaults`)
    for (const file of ['lib/core/options.js', 'lib/install-options.js', 'lib/dns/options.js', 'lib/http/options.js']) t.ok(out.afterOptions.includes(file), `${how}: ${file}, once the options are read`)
    t.notOk(out.afterOptions.includes('lib/http/global-dispatcher.js'), `${how}: no dispatcher before undici's slot is read`)
    t.ok(out.afterSlot.includes('lib/http/global-dispatcher.js'), `${how}: the slot's first read makes it`)
    t.notOk(out.afterSlot.includes('lib/kafka/kafkajs-known.js'), `${how}: no kafkajs check before kafkajs loads`)
    t.ok(out.afterKafkajs.includes('lib/kafka/kafkajs-known.js'), `${how}: kafkajs's producer, as it loads, has its files checked`)
  }
})

// install() with no options resolves the defaults only when they are read:
// what it then holds is exactly what validating every module's defaults gives.
t.test('install() with the defaults holds the options install() validates for them', async (t) => {
  const lazy = ioHygiene.install()
  const read = lazy.options
  t.ok(Object.isFrozen(read), 'frozen, as validated options are')
  const asRead = JSON.parse(JSON.stringify(read))
  ioHygiene.uninstall()
  const validated = ioHygiene.install({ kafkajs: true, dns: true, http: true, monitor: false })
  t.same(asRead, JSON.parse(JSON.stringify(validated.options)), 'the same options, module by module')
  t.same(Object.keys(read), Object.keys(validated.options), 'in the same order')
  ioHygiene.uninstall()
  const again = ioHygiene.install({})
  t.same(await warningsOf(() => t.equal(ioHygiene.install(), again)), [], 'install() after install({}): the same installation, silently')
  t.same(await warningsOf(() => t.equal(ioHygiene.install({ dns: true }), again)), [], 'and after options equal to the defaults')
  const [warning] = await warningsOf(() => t.equal(ioHygiene.install({ dns: { maxTtlMs: 1000 } }), again))
  t.match(warning.message, /dns\.maxTtlMs \(asked 1000, in use 300000\)/, 'other options: compared with the defaults in use')
})

// A package.json "exports" map makes Node 20's require() load its ES module
// resolver to read it: about 2 ms of every start, so the package has none
// (README, Overhead). The child runs without tap's NODE_OPTIONS, whose
// loader would have loaded that resolver already: tap puts it back into any
// environment a test spawns node with, so env(1) takes it out.
t.test('require(\'io-hygiene\') by name loads none of Node\'s ES module loader', async (t) => {
  const script = `
    const before = new Set(process.moduleLoadList)
    require('io-hygiene').install()
    process.stdout.write(JSON.stringify(process.moduleLoadList.filter((m) => !before.has(m))))
  `
  const { stdout } = await util.promisify(execFile)('env', ['-u', 'NODE_OPTIONS', process.execPath, '-e', script], { cwd: path.join(__dirname, '..'), env: childEnv() })
  const loaded = JSON.parse(stdout)
  t.ok(loaded.includes('NativeModule dns'), 'the run loads what install() needs')
  t.same(loaded.filter((m) => m.includes('modules/esm')), [], 'and nothing of the ES module loader')
})

// index.js loads most of the package at first call; ES modules must still
// find every export by name (Node reads a CommonJS module's names from its
// source), Histogram, behind a getter, included.
t.test('every export can be imported by name from an ES module', async (t) => {
  const script = `
    import * as all from 'io-hygiene'
    import { Histogram, histogram } from 'io-hygiene'
    // Node 23 and later add a 'module.exports' name beside 'default'.
    const names = Object.keys(all).filter((n) => n !== 'default' && n !== 'module.exports').sort()
    process.stdout.write(JSON.stringify({ names, same: histogram('esm.test') instanceof Histogram }))
  `
  const { code, out, stderr } = await run(['--input-type=module', '-e', script])
  t.equal(code, 0, stderr)
  t.same(out.names, Object.keys(ioHygiene).sort())
  t.equal(out.same, true, 'histogram() makes the Histogram imported by name')
})

// index.js's functions load their module at the first call and hand it the
// arguments: each fails as its module's own function does, on the last
// argument where there are two (so a call that dropped it would fail otherwise).
t.test('every function the package exports is its module\'s, arguments and errors included', async (t) => {
  const StatsD = require('hot-shots')
  const client = new StatsD({ host: '127.0.0.1', port: 9, errorHandler: () => {} })
  t.teardown(() => new Promise((resolve) => client.close(resolve)))
  const calls = [
    ['createDnsCache', '../lib/dns', [{ maxEntries: 0 }]],
    ['createBatcher', '../lib/batch', [{}]],
    ['wrapProducer', '../lib/kafka', [null, { lingerMS: 5 }]],
    ['createStatsd', '../lib/statsd', [{ port: -1 }]],
    ['wrapStatsd', '../lib/statsd', [client, { prefx: 'x.' }]],
    ['createHttpSink', '../lib/http/sink', [{}]],
    ['createMonitor', '../lib/monitor', [{ intervalMs: -1 }]],
    ['histogram', '../lib/metrics/registry', ['ok.kind', ['not', 'labels']]],
  ]
  for (const [name, file, args] of calls) {
    let expected = null
    try { require(file)[name](...args) } catch (err) { expected = err }
    t.ok(expected?.code?.startsWith('ERR_IO_HYGIENE_'), `${name}: the module refuses these arguments`)
    t.throws(() => ioHygiene[name](...args), { code: expected.code, message: expected.message }, name)
  }
})
