'use strict'

const fs = require('node:fs')
const { promisify } = require('node:util')
const { isIP } = require('./ip')

// fs's callback API: fs.promises would load ~10 internal modules (readline
// among them) into every process that makes a cache.
const stat = promisify(fs.stat)
const readFile = promisify(fs.readFile)

// The hosts file, parsed on demand and re-read when its mtime, ctime, size,
// inode or device changes, checked at most once per `checkIntervalMs` (0: at every lookup,
// as the cache does: a stat per resolution, so that a refresh follows the
// file as getaddrinfo would at that moment). It tells the cache which names
// the system resolver answers from the file, so they are cached for
// fallbackTtlMs without asking DNS for a TTL they do not have.
class HostsFile {
  #path
  #checkIntervalMs
  #names = new Map() // lower-case name -> [{ address, family }]
  #version = '' // mtime, ctime, size, inode and device as last read
  #checkedAt = -Infinity
  #loading = null
  generation = 0 // grows with every change of the file's names

  constructor (path, checkIntervalMs) {
    this.#path = path
    this.#checkIntervalMs = checkIntervalMs
    // Read at the first lookup, not here: a process that installs the cache
    // at start does not wait for the file (and node:net, which parses it).
    // With the system resolver the read follows the answer, off the caller's path.
  }

  // callback(addresses | undefined): the file's addresses for `hostname`.
  lookup (hostname, callback) {
    if (this.#path === null) return process.nextTick(callback, undefined)
    if (performance.now() - this.#checkedAt < this.#checkIntervalMs) {
      return process.nextTick(callback, this.#names.get(hostname.toLowerCase()))
    }
    this.#refresh().then(() => callback(this.#names.get(hostname.toLowerCase())))
  }

  #refresh () {
    this.#loading ??= this.#load().finally(() => {
      this.#loading = null
      this.#checkedAt = performance.now()
    })
    return this.#loading
  }

  async #load () {
    let info
    try {
      info = await stat(this.#path)
    } catch {
      if (this.#version !== '') this.generation++
      this.#names = new Map()
      this.#version = ''
      return
    }
    // ctime too: an edit in place that keeps the size and restores the
    // mtime (cp -p, tar, a coarse clock) still moves it; dev, for a file
    // bind-mounted in place of another with the same inode number.
    const version = `${info.mtimeMs} ${info.ctimeMs} ${info.size} ${info.ino} ${info.dev}`
    if (version === this.#version) return
    let text
    try {
      text = await readFile(this.#path, 'utf8')
    } catch {
      text = ''
    }
    this.#names = parseHosts(text)
    this.#version = version
    this.generation++
  }
}

function parseHosts (text) {
  const names = new Map()
  for (let line of text.split('\n')) {
    // A comment, or a NUL (glibc reads the line as a C string), ends it.
    const end = line.search(/[#\0]/)
    if (end !== -1) line = line.slice(0, end)
    // Fields as glibc's nss_files splits them: C's isspace, not Unicode's
    // (a no-break space is part of a name).
    const fields = line.split(/[ \t\n\v\f\r]+/).filter(Boolean)
    if (fields.length < 2) continue
    // An address inet_pton reads: a scoped IPv6 one is not, and glibc skips
    // its line (the name goes to DNS).
    const family = fields[0].includes('%') ? 0 : isIP(fields[0])
    if (family === 0) continue
    for (let i = 1; i < fields.length; i++) {
      const name = fields[i].toLowerCase()
      let list = names.get(name)
      if (list === undefined) names.set(name, (list = []))
      if (!list.some((a) => a.address === fields[0])) list.push({ address: fields[0], family })
    }
  }
  return names
}

module.exports = { HostsFile, parseHosts }
