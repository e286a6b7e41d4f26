'use strict'

// Runs a script in a private mount namespace (`unshare -m`) where
// /etc/resolv.conf and /etc/hosts are bind-mounted to files the caller writes,
// so the system resolver (getaddrinfo) asks a test DNS server. Needs root and
// util-linux; `namespaceSupport()` says why not where it is impossible.
const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

let support
function namespaceSupport () {
  if (support !== undefined) return support
  if (process.platform !== 'linux') return (support = 'private mount namespaces need Linux')
  if (process.getuid?.() !== 0) return (support = 'private mount namespaces need root (unshare -m)')
  const probe = spawnSync('unshare', ['-m', 'mount', '--bind', '/etc/hosts', '/etc/hosts'], { stdio: 'ignore' })
  if (probe.error || probe.status !== 0) return (support = 'unshare -m with bind mounts is not available here')
  return (support = true)
}

// A loopback address of our own for the test DNS server: resolv.conf cannot
// name a port, so it must listen on port 53, and a random 127.x address keeps
// two runs from colliding.
function randomLoopback () {
  const b = () => 1 + Math.floor(Math.random() * 250)
  return `127.${b()}.${b()}.${b()}`
}

// Writes the files and returns { dir, resolvConf, hosts }.
function writeResolverFiles ({ nameserver, hosts = '127.0.0.1 localhost\n::1 localhost\n', search = [], options = 'timeout:1 attempts:1' }) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-ns-'))
  const resolvConf = path.join(dir, 'resolv.conf')
  const hostsFile = path.join(dir, 'hosts')
  let conf = `nameserver ${nameserver}\n`
  if (search.length) conf += `search ${search.join(' ')}\n`
  if (options) conf += `options ${options}\n`
  fs.writeFileSync(resolvConf, conf)
  fs.writeFileSync(hostsFile, hosts)
  return { dir, resolvConf, hosts: hostsFile }
}

// An IPv4-only host, as glibc's AI_ADDRCONFIG sees one (by addresses): a
// network namespace of its own, loopback up, and a veth pair with an IPv4
// address whose IPv6 is switched off before it comes up (so no link-local
// address appears either).
const IPV4_ONLY = [
  'ip link set lo up',
  'ip link add v4only0 type veth peer name v4only1',
  'echo 1 > /proc/sys/net/ipv6/conf/v4only0/disable_ipv6',
  'echo 1 > /proc/sys/net/ipv6/conf/v4only1/disable_ipv6',
  'ip addr add 10.254.0.1/24 dev v4only0',
  'ip link set v4only0 up',
  'ip link set v4only1 up',
].join(' && ')

let ipv4Support
function ipv4OnlySupport () {
  if (ipv4Support !== undefined) return ipv4Support
  const base = namespaceSupport()
  if (base !== true) return (ipv4Support = base)
  const probe = spawnSync('unshare', ['-n', 'sh', '-c', IPV4_ONLY], { stdio: 'ignore' })
  if (probe.error || probe.status !== 0) return (ipv4Support = 'a network namespace with a veth pair is not available here')
  return (ipv4Support = true)
}

// Spawns `process.execPath args...` inside the namespace; returns the child.
// `ipv4Only`: in a network namespace of its own that has IPv4 only;
// `loOnly`: in one that has loopback only (for glibc, neither family).
function spawnInNamespace (files, args, options = {}, { ipv4Only = false, loOnly = false } = {}) {
  const network = ipv4Only ? IPV4_ONLY + ' && ' : loOnly ? 'ip link set lo up && ' : ''
  const script = `${network}mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"`
  return spawn('unshare', [...(network !== '' ? ['-n'] : []), '-m', 'sh', '-c', script, 'sh', files.resolvConf, files.hosts, process.execPath, ...args], options)
}

module.exports = { namespaceSupport, ipv4OnlySupport, randomLoopback, writeResolverFiles, spawnInNamespace }
