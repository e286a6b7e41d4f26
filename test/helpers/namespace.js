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

// Spawns `process.execPath args...` inside the namespace; returns the child.
function spawnInNamespace (files, args, options = {}) {
  const script = 'mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
  return spawn('unshare', ['-m', 'sh', '-c', script, 'sh', files.resolvConf, files.hosts, process.execPath, ...args], options)
}

module.exports = { namespaceSupport, randomLoopback, writeResolverFiles, spawnInNamespace }
