'use strict'

const fs = require('node:fs')
const os = require('node:os')
const { promisify } = require('node:util')

// fs's callback API, as hosts.js uses it: fs.promises loads more than it needs.
const stat = promisify(fs.stat)
const readFile = promisify(fs.readFile)

// The system resolver's configuration, read as glibc reads /etc/resolv.conf,
// so that a DNS query of ours asks only what getaddrinfo asked: the search
// list, ndots, the servers and the options that change which queries go out.
// Re-read when the file's mtime changes, checked at most once per
// `checkIntervalMs`; `generation` grows with every change, so an entry that
// learned its name under one configuration knows when it no longer holds.

// glibc's defaults and bounds (resolv/resolv.h, res_init.c).
const MAXNS = 3
const MAX_NDOTS = 15
// glibc 2.26+ has no limit on the search list; a bound keeps ours finite.
const MAX_SEARCH = 64

function defaults () {
  return { nameservers: [], search: [], ndots: 1, noAaaa: false, noTldQuery: false, edns: false }
}

// `env`: LOCALDOMAIN replaces the search list, RES_OPTIONS adds options, as
// for glibc. `hostname`: the domain of a dotted hostname is the search list
// when the file names none.
function parseResolvConf (text, { env = process.env, hostname = os.hostname() } = {}) {
  const conf = defaults()
  let search = null
  for (const raw of text.split('\n')) {
    if (raw[0] === '#' || raw[0] === ';') continue
    const words = raw.trim().split(/\s+/)
    const key = words[0]
    if (key === 'nameserver' && words.length > 1) {
      if (conf.nameservers.length < MAXNS) conf.nameservers.push(words[1])
    } else if (key === 'domain' && words.length > 1) {
      search = [words[1]]
    } else if (key === 'search') {
      search = words.slice(1, 1 + MAX_SEARCH).filter(stopAtComment())
    } else if (key === 'options') {
      applyOptions(conf, words.slice(1))
    }
  }
  if (typeof env.LOCALDOMAIN === 'string') search = env.LOCALDOMAIN.trim().split(/\s+/).filter(Boolean).slice(0, MAX_SEARCH)
  if (search === null) {
    const dot = hostname.indexOf('.')
    search = dot !== -1 && dot < hostname.length - 1 ? [hostname.slice(dot + 1)] : []
  }
  conf.search = search
  if (typeof env.RES_OPTIONS === 'string') applyOptions(conf, env.RES_OPTIONS.trim().split(/\s+/))
  return conf
}

// A '#' or ';' word ends a search line (glibc stops there too).
function stopAtComment () {
  let stopped = false
  return (word) => {
    if (word[0] === '#' || word[0] === ';') stopped = true
    return !stopped && word !== ''
  }
}

function applyOptions (conf, words) {
  for (const word of words) {
    if (word.startsWith('ndots:')) {
      const n = Number.parseInt(word.slice(6), 10)
      if (n >= 0) conf.ndots = Math.min(n, MAX_NDOTS)
    } else if (word === 'no-aaaa') conf.noAaaa = true
    else if (word === 'no-tld-query') conf.noTldQuery = true
    else if (word === 'edns0') conf.edns = true
  }
}

// The names glibc's res_search asks for `name`, in its order: as written
// first when it has at least `ndots` dots (only that, with a trailing dot),
// then with each search domain, then as written last if not tried yet (not
// for a name without dots under no-tld-query).
function searchCandidates (name, conf) {
  if (name.endsWith('.')) return [name.slice(0, -1)]
  let dots = 0
  for (let i = name.indexOf('.'); i !== -1; i = name.indexOf('.', i + 1)) dots++
  const out = []
  let asIs = false
  if (dots >= conf.ndots) {
    out.push(name)
    asIs = true
  }
  let rootOnList = false
  for (const domain of conf.search) {
    if (domain === '.') {
      rootOnList = true
      if (!asIs) {
        out.push(name)
        asIs = true
      }
      continue
    }
    out.push(`${name}.${domain.endsWith('.') ? domain.slice(0, -1) : domain}`)
  }
  if (!asIs && !rootOnList && (dots > 0 || conf.search.length === 0 || !conf.noTldQuery)) out.push(name)
  return out
}

class ResolvConf {
  #path
  #checkIntervalMs
  #version = '' // mtime, size and inode as last read
  #checkedAt = -Infinity
  #loading = null
  #parseOptions
  config = defaults()
  generation = 0

  constructor (path = '/etc/resolv.conf', checkIntervalMs = 1000, parseOptions = undefined) {
    this.#path = path
    this.#checkIntervalMs = checkIntervalMs
    this.#parseOptions = parseOptions
  }

  // callback(config), the file re-read first if it may have changed.
  current (callback) {
    if (performance.now() - this.#checkedAt < this.#checkIntervalMs) return process.nextTick(callback, this.config)
    this.#loading ??= this.#load().finally(() => {
      this.#loading = null
      this.#checkedAt = performance.now()
    })
    this.#loading.then(() => callback(this.config))
  }

  async #load () {
    let info
    try {
      info = await stat(this.#path)
    } catch {
      info = null
    }
    const version = info === null ? 'none' : `${info.mtimeMs} ${info.size} ${info.ino}`
    if (version === this.#version) return
    let text = ''
    if (info !== null) {
      try {
        text = await readFile(this.#path, 'latin1')
      } catch {}
    }
    this.config = parseResolvConf(text, this.#parseOptions)
    this.#version = version
    this.generation++
  }
}

module.exports = { ResolvConf, parseResolvConf, searchCandidates }
