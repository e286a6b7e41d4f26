'use strict'

const t = require('tap')
const dns = require('node:dns')
const util = require('node:util')
const ioHygiene = require('..')
const { optionsFromEnv, envName } = require('../lib/env')
const { modules } = require('../lib/install')

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

t.test('install() is idempotent for the same options and refuses different ones', async (t) => {
  const a = ioHygiene.install({ dns: { maxTtlMs: 5000 } })
  t.equal(ioHygiene.install({ dns: { maxTtlMs: 5000 } }), a)
  t.throws(() => ioHygiene.install({ dns: { maxTtlMs: 6000 } }), { code: 'ERR_IO_HYGIENE_ALREADY_INSTALLED' })
  t.throws(() => ioHygiene.install({ dns: false }), { code: 'ERR_IO_HYGIENE_ALREADY_INSTALLED' })
  ioHygiene.uninstall()
  const b = ioHygiene.install({ dns: { servers: ['127.0.0.1:53'] } })
  t.equal(ioHygiene.install({ dns: { servers: ['127.0.0.1:53'] } }), b, 'equal arrays are the same options')
  t.throws(() => ioHygiene.install({ dns: { servers: ['127.0.0.2:53'] } }), { code: 'ERR_IO_HYGIENE_ALREADY_INSTALLED' })
  ioHygiene.uninstall()
  const c = ioHygiene.install({ dns: true })
  t.equal(ioHygiene.install(), c, 'true and the defaults are the same options')
  ioHygiene.uninstall()
  const off = ioHygiene.install({ dns: false })
  t.equal(ioHygiene.install({ dns: false }), off)
  t.throws(() => ioHygiene.install(), { code: 'ERR_IO_HYGIENE_ALREADY_INSTALLED' })
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
  t.equal(handle.dns, null)
  t.equal(dns.lookup, originalLookup)
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
  const { originalOf } = require('../lib/patch')
  t.equal(originalOf(dns.lookup), originalLookup)
})

t.test('IO_HYGIENE_* variables become install() options', async (t) => {
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
