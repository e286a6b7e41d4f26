'use strict'

// The README, the types and the code must say the same thing: every error
// code, and every option with its default.
const t = require('tap')
const fs = require('node:fs')
const path = require('node:path')
const { codes } = require('../lib/errors')

const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8')
const types = fs.readFileSync(path.join(__dirname, '..', 'types', 'index.d.ts'), 'utf8')

// Rows of the markdown table that follows `<!-- marker -->`.
function table (marker) {
  const start = readme.indexOf(`<!-- ${marker} -->`)
  if (start === -1) return null
  const rows = []
  for (const line of readme.slice(start).split('\n').slice(1)) {
    if (!line.startsWith('|')) {
      if (rows.length > 0) break
      continue
    }
    rows.push(line.slice(1, -1).split(/(?<!\\)\|/).map((cell) => cell.trim()))
  }
  return rows.slice(2) // header and separator
}

t.test('every error code constructs with its class, and the README and types list exactly those', async (t) => {
  const rows = table('errors')
  const documented = Object.fromEntries(rows.map(([code, cls]) => [code.replace(/`/g, ''), cls]))
  t.same(Object.keys(documented).sort(), Object.keys(codes).sort(), 'README lists every code, and no other')
  const typed = [...types.matchAll(/'(ERR_IO_HYGIENE_[A-Z_]+)'/g)].map((m) => m[1])
  t.same([...new Set(typed)].sort(), Object.keys(codes).sort(), 'types list every code, and no other')
  for (const [code, Class] of Object.entries(codes)) {
    const err = new Class('a', 'b', ['c'], 'd', { cause: new Error('why') })
    t.equal(err.code, code)
    t.equal(err.cause.message, 'why', `${code} keeps its cause`)
    t.ok(err instanceof Error)
    const base = [RangeError, TypeError].find((B) => err instanceof B)?.name ?? 'Error'
    t.equal(base, documented[code], `${code} is a ${documented[code]}`)
    t.equal(err.name, base, `${code}: name is ${base}, as Node's own errors`)
    t.ok(err.stack.startsWith(`${base} [${code}]: ${err.message}\n`), `${code} shows in the stack`)
    t.equal(String(err), `${base} [${code}]: ${err.message}`)
    t.notOk(Object.keys(err).includes('name'))
    t.type(err.message, 'string')
  }
})

t.test('error messages describe the value they got', async (t) => {
  const { ERR_IO_HYGIENE_INVALID_OPTION } = codes
  const got = (value) => new ERR_IO_HYGIENE_INVALID_OPTION('x()', 'opt', 'a number', value).message
  t.match(got('5'), /got "5"$/)
  t.match(got(5n), /got 5n$/)
  t.match(got(null), /got null$/)
  t.match(got([1, 'a']), /got \[1,"a"\]$/)
  t.match(got([{}]), /got an array$/)
  t.match(got(['x'.repeat(80)]), /got an array$/)
  const because = new ERR_IO_HYGIENE_INVALID_OPTION('x()', 'opt', 'an address', 'b', { cause: new Error('not an IP') })
  t.equal(because.message, 'x(): option "opt" must be an address, got "b" (not an IP)', 'the reason is in the message')
  t.match(got({}), /got an object$/)
  t.match(got(() => {}), /got \(\) => \{\}$/)
})

// A README default cell as a value: `10000`, `"/etc/hosts"`, `'wait'`, `null`, `true`.
function parseDefault (cell) {
  const raw = /^`(.*)`$/.exec(cell)?.[1]
  if (/^'.*'$/.test(raw)) return { value: raw.slice(1, -1) }
  return { value: JSON.parse(raw) }
}

const specOf = (defaults) => Object.fromEntries(Object.entries(defaults).map(([k, v]) => [k, { default: v }]))
const modules = {
  dns: require('../lib/dns').spec,
  batch: require('../lib/batch').spec,
  kafka: require('../lib/kafka').spec,
  statsd: specOf(require('../lib/statsd').defaults),
  'http-sink': require('../lib/http/sink').spec,
}

for (const [name, spec] of Object.entries(modules)) {
  t.test(`the README's ${name} options table equals the code's defaults`, async (t) => {
    const rows = table(`options:${name}`)
    t.ok(rows, `README has an options:${name} table`)
    const documented = Object.fromEntries(rows.map(([option, , , dflt]) => [option.replace(/`/g, ''), dflt]))
    t.same(Object.keys(documented).sort(), Object.keys(spec).sort(), 'every option, and no other')
    for (const [option, cell] of Object.entries(documented)) {
      const actual = spec[option]?.default
      if (typeof actual === 'function') {
        t.notMatch(cell, /^`null`$/, `${option}: a described default`)
      } else {
        t.same(parseDefault(cell).value, actual, `${option} defaults to ${cell}`)
      }
    }
  })
}
