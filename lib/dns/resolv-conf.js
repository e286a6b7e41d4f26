'use strict'

const fs = require('node:fs')
const os = require('node:os')
const { promisify } = require('node:util')
const { isIP } = require('./ip')

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
const MAX_TIMEOUT = 30 // RES_MAXRETRANS, seconds
const MAX_ATTEMPTS = 5 // RES_MAXRETRY
// glibc 2.26+ has no limit on the search list; a bound keeps ours finite.
const MAX_SEARCH = 64

function defaults () {
  return { nameservers: [], search: [], ndots: 1, timeout: 5, attempts: 2, rotate: false, noAaaa: false, noTldQuery: false, edns: false }
}

// `env`: LOCALDOMAIN replaces the search list, RES_OPTIONS adds options, as
// for glibc. `hostname`: the domain of a dotted hostname is the search list
// when the file names none. Lines are read as glibc 2.36's res_vinit_1 reads
// them: a keyword counts only at the start of its line and followed by a
// space or a tab; anything else is skipped, never an error.
function parseResolvConf (text, { env = process.env, hostname = os.hostname() } = {}) {
  const conf = defaults()
  const fromEnv = typeof env.LOCALDOMAIN === 'string'
  let search = null
  for (let line of text.split('\n')) {
    // glibc reads the line as a C string: a NUL ends it.
    const nul = line.indexOf('\0')
    if (nul !== -1) line = line.slice(0, nul)
    if (keyword(line, 'nameserver')) {
      const server = nameserver(line.slice(10))
      if (server !== null && conf.nameservers.length < MAXNS) conf.nameservers.push(server)
    } else if (keyword(line, 'domain')) {
      const word = firstWord(line.slice(6))
      if (!fromEnv && word !== '') search = [word]
    } else if (keyword(line, 'search')) {
      const words = line.slice(6).split(/[ \t]+/).filter(Boolean)
      if (!fromEnv && words.length > 0) search = words.slice(0, MAX_SEARCH)
    } else if (keyword(line, 'options')) {
      applyOptions(conf, line.slice(7))
    }
  }
  if (fromEnv) search = env.LOCALDOMAIN.split(/[ \t\n]+/).filter(Boolean).slice(0, MAX_SEARCH)
  if (search === null) {
    const dot = hostname.indexOf('.')
    search = dot !== -1 && dot < hostname.length - 1 ? [hostname.slice(dot + 1)] : []
  }
  conf.search = search
  if (typeof env.RES_OPTIONS === 'string') applyOptions(conf, env.RES_OPTIONS)
  return conf
}

// glibc's MATCH(): the keyword at column 0, then a space or a tab.
function keyword (line, word) {
  return line.startsWith(word) && (line[word.length] === ' ' || line[word.length] === '\t')
}

// glibc ends the word at a space, a tab or the line's end, and keeps a CR
// (a CRLF file's domain is "a.test\r", and so are the names it asks).
function firstWord (rest) {
  return rest.replace(/^[ \t]+/, '').split(/[ \t]/)[0]
}

// A nameserver line's first word, as glibc takes it: an IPv4 address in any
// form inet_aton accepts, whole (10.1 is 10.0.0.1; 10.0.0.1; is nothing), or
// an IPv6 address, with a scope after '%' (kept: an unknown scope is glibc's
// scope 0, and our send to it fails as glibc's does). No port, no name, no
// brackets. Returns the address as a socket takes it, or null to skip it.
function nameserver (rest) {
  const word = rest.replace(/^[ \t]+/, '').split(/[ \t\n]/)[0]
  const v4 = inetAton(word)
  if (v4 !== null) return v4
  const percent = word.indexOf('%')
  const address = percent === -1 ? word : word.slice(0, percent)
  if (address === '' || isIP(address) !== 6) return null
  const scope = percent === -1 ? '' : word.slice(percent + 1)
  return scope === '' ? address : `${address}%${scope}`
}

// inet_aton's forms (a, a.b, a.b.c, a.b.c.d; each part decimal, 0x hex or
// 0 octal; the last part fills the bytes left), exact: nothing may follow.
// Returns the dotted quad, or null.
function inetAton (text) {
  const parts = text.split('.')
  if (parts.length > 4) return null
  const values = []
  for (const part of parts) {
    let value
    if (/^0[xX][0-9a-fA-F]*$/.test(part)) value = part.length === 2 ? 0 : Number.parseInt(part.slice(2), 16)
    else if (/^0[0-7]*$/.test(part)) value = Number.parseInt(part, 8)
    else if (/^[1-9][0-9]*$/.test(part)) value = Number(part)
    else return null
    values.push(value)
  }
  const last = values.pop()
  if (values.some((v) => v > 255) || last >= 2 ** (8 * (4 - values.length))) return null
  let n = last
  for (let i = 0; i < values.length; i++) n += values[i] * 2 ** (8 * (3 - i))
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`
}

// C's atoi: optional spaces and sign, then digits; anything else reads 0.
function atoi (text) {
  const m = /^[ \t]*([+-]?\d+)/.exec(text)
  return m === null ? 0 : Number.parseInt(m[1], 10)
}

// res_setoptions: words by prefix, as glibc matches them (edns0x is edns0);
// unknown words are skipped.
function applyOptions (conf, text) {
  for (const word of text.split(/[ \t]+/)) {
    if (word.startsWith('ndots:')) conf.ndots = Math.min(Math.max(atoi(word.slice(6)), 0), MAX_NDOTS)
    else if (word.startsWith('timeout:')) conf.timeout = Math.min(Math.max(atoi(word.slice(8)), 0), MAX_TIMEOUT)
    else if (word.startsWith('attempts:')) conf.attempts = Math.min(Math.max(atoi(word.slice(9)), 0), MAX_ATTEMPTS)
    else if (word.startsWith('rotate')) conf.rotate = true
    else if (word.startsWith('edns0')) conf.edns = true
    else if (word.startsWith('no_tld_query') || word.startsWith('no-tld-query')) conf.noTldQuery = true
    else if (word.startsWith('no-aaaa')) conf.noAaaa = true
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
  #version = '' // mtime, ctime, size, inode and device as last read
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
    // As hosts.js: ctime and dev too, so no edit in place goes unseen.
    const version = info === null ? 'none' : `${info.mtimeMs} ${info.ctimeMs} ${info.size} ${info.ino} ${info.dev}`
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

module.exports = { ResolvConf, parseResolvConf, searchCandidates, inetAton }
