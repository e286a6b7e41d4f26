'use strict'

const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { cacheWithServer } = require('./helpers/dns-cache')
const { HostsFile, parseHosts } = require('../lib/dns/hosts')

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-hosts-'))
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }))

t.test('parseHosts reads addresses per name, case-insensitively, skipping comments and junk', async (t) => {
  const names = parseHosts('# comment\n10.0.0.1 A.test b.test # trailing\n\nnot-an-ip c.test\nfd00::1 a.test\n10.0.0.1 a.test\nlonely\n')
  t.same(names.get('a.test'), [{ address: '10.0.0.1', family: 4 }, { address: 'fd00::1', family: 6 }])
  t.same(names.get('b.test'), [{ address: '10.0.0.1', family: 4 }])
  t.equal(names.has('c.test'), false)
  t.equal(names.size, 2)
})

// Lines the real getaddrinfo skips or reads otherwise (checked in a private
// namespace: Node's lookup answered these names from DNS). Taken as listed,
// the cache kept their DNS answers fallbackTtlMs, past their TTL.
t.test('parseHosts skips what glibc skips: a scoped IPv6 address, names split by a no-break space', async (t) => {
  const names = parseHosts('fe80::1%lo scoped.test\n10.0.0.9 foo\u00a0nbsp.test\n10.0.0.8\u00a0nbsp2.test\n10.0.0.7\tok.test\v\fok2.test\r\n')
  t.equal(names.has('scoped.test'), false, 'scoped')
  t.equal(names.has('nbsp.test'), false, 'a no-break space is part of the name')
  t.same(names.get('foo\u00a0nbsp.test'), [{ address: '10.0.0.9', family: 4 }])
  t.equal(names.has('nbsp2.test'), false, 'nor is 10.0.0.8\u00a0nbsp2.test an address')
  t.same(names.get('ok.test'), [{ address: '10.0.0.7', family: 4 }])
  t.same(names.get('ok2.test'), [{ address: '10.0.0.7', family: 4 }], 'tab, vertical tab, form feed and CR are spaces')
  const nul = parseHosts('10.0.0.9 svc.test\0 nul.test\n')
  t.same([...nul.keys()], ['svc.test'], 'a NUL ends the line: nul.test goes to DNS, as for glibc')
})

t.test('the hosts file is re-read when it changes, and a missing or unreadable one means no entries', async (t) => {
  const file = path.join(tmp, 'hosts')
  fs.writeFileSync(file, '10.0.0.1 one.test\n')
  const hosts = new HostsFile(file, 0)
  const ask = (name) => new Promise((resolve) => hosts.lookup(name, resolve))
  t.same(await ask('one.test'), [{ address: '10.0.0.1', family: 4 }])
  fs.writeFileSync(file, '10.0.0.2 one.test\n')
  fs.utimesSync(file, new Date(), new Date(Date.now() + 5000))
  t.same(await ask('one.test'), [{ address: '10.0.0.2', family: 4 }])
  t.same(await ask('one.test'), [{ address: '10.0.0.2', family: 4 }], 'unchanged file, same answer')
  // Same size, same inode, the mtime put back (as cp -p or tar does, or a
  // clock too coarse to tell two writes apart): only the ctime moves.
  fs.utimesSync(file, 1_700_000_000, 1_700_000_000)
  t.same(await ask('one.test'), [{ address: '10.0.0.2', family: 4 }])
  fs.writeFileSync(file, '10.0.0.4 one.test\n')
  fs.utimesSync(file, 1_700_000_000, 1_700_000_000)
  t.same(await ask('one.test'), [{ address: '10.0.0.4', family: 4 }], 'an edit in place that keeps size and mtime')
  fs.rmSync(file)
  t.equal(await ask('one.test'), undefined)
  t.equal(await new Promise((resolve) => new HostsFile(tmp, 0).lookup('x', resolve)), undefined, 'a directory')
  t.equal(await new Promise((resolve) => new HostsFile(null, 0).lookup('x', resolve)), undefined, 'no hosts file')
  const slow = new HostsFile(file, 60_000)
  await new Promise((resolve) => slow.lookup('one.test', resolve))
  fs.writeFileSync(file, '10.0.0.3 one.test\n')
  t.equal(await new Promise((resolve) => slow.lookup('one.test', resolve)), undefined, 'not re-checked within the interval')
})

t.test('pure c-ares mode answers hosts-file names from the file', async (t) => {
  const file = path.join(tmp, 'hosts-servers')
  fs.writeFileSync(file, '10.9.0.1 local.test\nfd00::9 local.test\n10.9.0.2 v4local.test\n')
  const { server, cache, lookup } = await cacheWithServer(t, { hostsFile: file })
  t.same(await lookup('local.test', { family: 6 }), { address: 'fd00::9', family: 6 })
  t.same(await lookup('local.test'), { address: '10.9.0.1', family: 4 })
  const { V4MAPPED } = require('node:dns')
  t.same(await lookup('local.test', { family: 6, hints: V4MAPPED }), { address: 'fd00::9', family: 6 }, 'IPv6 first, as getaddrinfo')
  t.same(await lookup('v4local.test', { family: 6, hints: V4MAPPED }), { address: '::ffff:10.9.0.2', family: 6 }, 'mapped from the file')
  t.equal(server.queries, 0)
  t.equal(cache.stats().fallbacks, 4)
})
