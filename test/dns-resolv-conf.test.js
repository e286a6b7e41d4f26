'use strict'

// resolv.conf as glibc reads it, and the names its res_search asks, in order.
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { parseResolvConf, searchCandidates, ResolvConf } = require('../lib/dns/resolv-conf')

const K8S = `# written by the kubelet
nameserver 10.96.0.10
search ns1.svc.cluster.local svc.cluster.local cluster.local
options ndots:5
`

t.test('a pod\'s resolv.conf', async (t) => {
  const conf = parseResolvConf(K8S, { env: {}, hostname: 'pod' })
  t.same(conf, { nameservers: ['10.96.0.10'], search: ['ns1.svc.cluster.local', 'svc.cluster.local', 'cluster.local'], ndots: 5, timeout: 5, attempts: 2, rotate: false, noAaaa: false, noTldQuery: false, edns: false })
})

// What glibc 2.36's res_vinit_1 and res_setoptions do with each line: a
// server it cannot parse is skipped (never an error), the first word only.
t.test('nameserver lines as glibc reads them', async (t) => {
  const servers = (text) => parseResolvConf(text, { env: {}, hostname: 'h' }).nameservers
  for (const line of ['nameserver dns.corp.example', 'nameserver 10.0.0.1#x', 'nameserver 10.0.0.1;', 'nameserver [::1]',
    'nameserver [::1]:53', 'nameserver 10.0.0.1:53', 'nameserver 256.0.0.1', 'nameserver 1.2.3.4.5', 'nameserver 08.0.0.1',
    'nameserver', 'nameserver ', ' nameserver 10.0.0.1', 'nameserver:10.0.0.1', 'nameservers 10.0.0.1', '#nameserver 10.0.0.1',
    ';nameserver 10.0.0.1', 'nameserver %eth0', 'nameserver fe80::1::2']) {
    t.same(servers(line + '\n'), [], `skipped: ${JSON.stringify(line)}`)
  }
  t.same(servers('nameserver 10.0.0.1 # the corp resolver\n'), ['10.0.0.1'], 'text after a space is ignored')
  t.same(servers('nameserver\t10.0.0.1;x\tfoo\n'), [], 'but not text glued to the address')
  t.same(servers('nameserver 127.1\nnameserver 0x7f.0.0.2\nnameserver 0177.0.0.3\n'), ['127.0.0.1', '127.0.0.2', '127.0.0.3'], 'inet_aton\'s forms')
  t.same(servers('nameserver 10.65535\nnameserver 10.1.65536\n'), ['10.0.255.255'], 'the last part fills the bytes left, no more')
  const { inetAton } = require('../lib/dns/resolv-conf')
  t.equal(inetAton('0x.0.0.1'), '0.0.0.1', 'a bare 0x is 0, as glibc\'s inet_aton reads it')
  t.equal(inetAton('1.2.3.'), null, 'an empty part')
  t.same(servers('nameserver fe80::1%eth0\nnameserver fd00::53\n'), ['fe80::1%eth0', 'fd00::53'], 'IPv6, a scope kept')
  t.same(servers('nameserver 1.1.1.1\nnameserver bad\nnameserver 2.2.2.2\nnameserver 3.3.3.3\nnameserver 4.4.4.4\n'), ['1.1.1.1', '2.2.2.2', '3.3.3.3'], 'MAXNS counts the servers kept')
})

t.test('options as glibc reads them', async (t) => {
  const parse = (text, env = {}) => parseResolvConf(text, { env, hostname: 'h' })
  t.match(parse('options ndots:2 timeout:3 attempts:4 rotate\n'), { ndots: 2, timeout: 3, attempts: 4, rotate: true })
  t.match(parse('options timeout:99 attempts:99 ndots:99\n'), { ndots: 15, timeout: 30, attempts: 5 }, 'capped as glibc caps them')
  t.match(parse('options ndots:x edns0x rotatey\n'), { ndots: 0, edns: true, rotate: true }, 'atoi and prefixes, as glibc matches them')
  t.match(parse('options\tno_tld_query no-aaaa unknown # comment\n'), { noTldQuery: true, noAaaa: true })
  t.match(parse(' options ndots:4\noptions:ndots:4\n'), { ndots: 1 }, 'not at the start of the line: not an options line')
  t.match(parse('options ndots:2\noptions ndots:3\n', { RES_OPTIONS: 'ndots:4' }), { ndots: 4 }, 'later wins, RES_OPTIONS last')
})

t.test('the last of domain and search wins; LOCALDOMAIN and RES_OPTIONS override; bounds', async (t) => {
  t.same(parseResolvConf('search a.test b.test\ndomain c.test\n', { env: {}, hostname: 'h' }).search, ['c.test'])
  t.same(parseResolvConf('domain c.test\nsearch a.test b.test\n', { env: {}, hostname: 'h' }).search, ['a.test', 'b.test'])
  t.same(parseResolvConf('search a.test b.test # x\n', { env: {}, hostname: 'h' }).search, ['a.test', 'b.test', '#', 'x'], 'glibc takes every word of a search line')
  t.same(parseResolvConf('search a.test\nsearch\ndomain\n', { env: {}, hostname: 'h' }).search, ['a.test'], 'an empty line changes nothing')
  t.same(parseResolvConf('domain c.test d.test\n', { env: {}, hostname: 'h' }).search, ['c.test'], 'domain: the first word')
  // Checked against the real getaddrinfo: with this file it asks "web.c.test\r"
  // then "web"; a cache that asked web.c.test found another name's answer.
  t.same(parseResolvConf('domain c.test\r\nsearch\r\n', { env: {}, hostname: 'h' }).search, ['c.test\r'], 'a CRLF domain line keeps its CR, as glibc')
  t.same(parseResolvConf('search a.test b.test\r\n', { env: {}, hostname: 'h' }).search, ['a.test', 'b.test\r'], 'and a search line')
  // Checked against the real getaddrinfo: it asked 127.0.0.2, and the search
  // list was a.test alone; a cache that skipped the line asked 127.0.0.1.
  t.match(parseResolvConf('nameserver 127.0.0.2\0x\nsearch a.test\0 b.test\n', { env: {}, hostname: 'h' }), { nameservers: ['127.0.0.2'], search: ['a.test'] }, 'a NUL ends the line')
  t.same(parseResolvConf('search a.test\n', { env: { LOCALDOMAIN: 'x.test y.test' }, hostname: 'h' }).search, ['x.test', 'y.test'])
  t.same(parseResolvConf('', { env: {}, hostname: 'web-1.corp.example' }).search, ['corp.example'], 'the hostname\'s domain when the file names none')
  t.same(parseResolvConf('', { env: {}, hostname: 'web-1' }).search, [])
  const conf = parseResolvConf('options ndots:40 no-aaaa\nnameserver 1.1.1.1\nnameserver 2.2.2.2\nnameserver 3.3.3.3\nnameserver 4.4.4.4\n', { env: { RES_OPTIONS: 'edns0 no-tld-query' }, hostname: 'h' })
  t.match(conf, { ndots: 15, noAaaa: true, edns: true, noTldQuery: true, nameservers: ['1.1.1.1', '2.2.2.2', '3.3.3.3'] })
})

t.test('candidates in glibc\'s order', async (t) => {
  const k8s = parseResolvConf(K8S, { env: {}, hostname: 'pod' })
  t.same(searchCandidates('statsd.monitoring', k8s), [
    'statsd.monitoring.ns1.svc.cluster.local', 'statsd.monitoring.svc.cluster.local', 'statsd.monitoring.cluster.local', 'statsd.monitoring',
  ], 'fewer dots than ndots: the search list first, the name as written last')
  t.same(searchCandidates('a.b.c.d.e.f', k8s).slice(0, 2), ['a.b.c.d.e.f', 'a.b.c.d.e.f.ns1.svc.cluster.local'], 'ndots or more: as written first')
  t.same(searchCandidates('api.example.com.', k8s), ['api.example.com'], 'a trailing dot: as written only')
  const plain = parseResolvConf('search corp.test\n', { env: {}, hostname: 'h' })
  t.same(searchCandidates('api.example.com', plain), ['api.example.com', 'api.example.com.corp.test'])
  t.same(searchCandidates('short', { ...plain, noTldQuery: true }), ['short.corp.test'], 'no-tld-query: a dotless name is never asked bare')
  t.same(searchCandidates('short', { ...plain, search: ['.', 'corp.test'] }), ['short', 'short.corp.test'], 'the root on the list')
  t.same(searchCandidates('short', { ...plain, search: ['corp.test.'] }), ['short.corp.test', 'short'], 'a domain written with its trailing dot')
})

t.test('ResolvConf notices a change of the file', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-resolv-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'resolv.conf')
  fs.writeFileSync(file, K8S)
  const rc = new ResolvConf(file, 0, { env: {}, hostname: 'pod' })
  const current = () => new Promise((resolve) => rc.current(resolve))
  t.equal((await current()).ndots, 5)
  const first = rc.generation
  t.equal((await current()).ndots, 5)
  t.equal(rc.generation, first, 'unchanged: the same generation')
  fs.writeFileSync(file, K8S.replace('ndots:5', 'ndots:2 no-aaaa'))
  t.match(await current(), { ndots: 2, noAaaa: true })
  t.ok(rc.generation > first)
  // Same size, same inode, the mtime put back (as cp -p or tar does, or a
  // clock too coarse to tell two writes apart): only the ctime moves.
  fs.utimesSync(file, 1_700_000_000, 1_700_000_000)
  await current()
  fs.writeFileSync(file, K8S.replace('ndots:5', 'ndots:3 no-aaaa'))
  fs.utimesSync(file, 1_700_000_000, 1_700_000_000)
  t.match(await current(), { ndots: 3 }, 'an edit in place that keeps size and mtime')
  fs.rmSync(file)
  t.match(await current(), { ndots: 1, nameservers: [] }, 'no file: glibc\'s defaults')
  fs.mkdirSync(file)
  t.match(await current(), { ndots: 1, nameservers: [] }, 'unreadable: the defaults too')
  const slow = new ResolvConf(path.join(dir, 'none'), 60_000)
  await new Promise((resolve) => slow.current(resolve))
  const generation = slow.generation
  await new Promise((resolve) => slow.current(resolve))
  t.equal(slow.generation, generation, 'not checked again within checkIntervalMs')
})

t.test('names no DNS server is asked for', async (t) => {
  const { mayAskDns, parseHostsLine } = require('../lib/dns/name-learner')
  const plain = parseHostsLine('hosts:          files dns')
  const mdns = parseHostsLine('hosts: files mdns4_minimal [NOTFOUND=return] dns myhostname')
  for (const name of ['localhost', 'LOCALHOST.', 'db.localhost']) t.equal(mayAskDns(name, plain), false, name)
  // Checked against the real getaddrinfo: with "files dns" and a hosts file
  // that does not list it, this host's name is answered by DNS, with a TTL.
  t.equal(mayAskDns(os.hostname(), plain), true, 'this host\'s name, without nss-myhostname')
  t.equal(mayAskDns(os.hostname(), parseHostsLine('hosts: files myhostname dns')), false, 'with nss-myhostname before dns')
  t.equal(mayAskDns(os.hostname(), mdns), true, 'with nss-myhostname after dns')
  t.equal(mayAskDns('api.example.com', plain), true)
  t.equal(mayAskDns('statsd.monitoring.svc.cluster.local.', plain), true, 'cluster.local is DNS unless nsswitch says mDNS')
  t.equal(mayAskDns('printer.local', mdns), false, 'with mDNS in nsswitch, .local is not DNS\'s')
  t.equal(mayAskDns('api.example.com', mdns), true)
  t.equal(mayAskDns('api.example.com', parseHostsLine('hosts: files')), false, 'no dns in nsswitch: no DNS query at all')
  t.same(parseHostsLine(null), { dns: true, mdns: false, myhostname: false }, 'no nsswitch.conf: glibc\'s default')
})
