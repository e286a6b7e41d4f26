'use strict'

// The error classes load with the first refusal: valid options never need them.
const { sharedSlot } = require('./core/global-slot')
const errors = () => require('./core/errors')
const { PREFIX, mayBeOurs } = require('./core/global-slot')
const { distance } = require('./core/distance')

// install() options from IO_HYGIENE_* environment variables. IO_HYGIENE_<MODULE>=0
// turns a module off; IO_HYGIENE_<MODULE>_<OPTION> sets an option (maxTtlMs ->
// MAX_TTL_MS). Values are parsed by the option's type; install() then
// validates them as it validates code, so a bad value fails the same way.
// The known names come from the module specs, so a new module's options get
// variables without a list to keep in step.
// The project's own tests and benchmarks pass state to their child processes here.
const RESERVED = ['IO_HYGIENE_TEST_', 'IO_HYGIENE_BENCH_']

function envName (moduleName, key) {
  const snake = key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()
  return `${PREFIX}${moduleName.toUpperCase()}_${snake}`
}

// Options a variable can carry: functions and objects cannot be spelt in one.
function settable (expects) {
  return typeof expects === 'string' && /^(integer|number|boolean|string|")/.test(expects)
}

function parseValue (name, raw, expects) {
  if (expects.endsWith('| null') && raw === '') return null
  if (expects.startsWith('integer')) {
    if (!/^\d+$/.test(raw)) throw new (errors().ERR_IO_HYGIENE_INVALID_ENV)(name, 'a whole number', raw)
    return Number(raw)
  }
  if (expects.startsWith('number')) {
    if (!/^-?(\d+\.?\d*|\.\d+)$/.test(raw)) throw new (errors().ERR_IO_HYGIENE_INVALID_ENV)(name, 'a number', raw)
    return Number(raw)
  }
  if (expects.startsWith('boolean')) {
    if (raw === '1' || raw === 'true') return true
    if (raw === '0' || raw === 'false') return false
    throw new (errors().ERR_IO_HYGIENE_INVALID_ENV)(name, '1, 0, true or false', raw)
  }
  if (expects.startsWith('string[]')) return raw.split(',').map((s) => s.trim()).filter(Boolean)
  return raw
}

// Every variable install() reads: name -> { module, key, expects } (key null
// for the module's on/off switch).
function knownVariables (modules) {
  const known = new Map()
  for (const mod of modules) {
    known.set(`${PREFIX}${mod.name.toUpperCase()}`, { module: mod.name, key: null, expects: 'boolean' })
    const spec = mod.spec()
    for (const key of Object.keys(spec)) {
      const expects = spec[key].check.expects
      if (settable(expects)) known.set(envName(mod.name, key), { module: mod.name, key, expects })
    }
  }
  return known
}

// What install() takes from the environment: `options` as install() takes
// them and, per module, the variables that were set, to name them when a
// value is refused.
function readEnv (modules, env = process.env) {
  // Keyed by module name: without a prototype, a polluted
  // Object.prototype.dns is never read as a module's setting, nor written to.
  const options = Object.create(null)
  const names = Object.create(null)
  // The variables that mention us, spelt right or nearly. Nearly always
  // none: then no module's spec is loaded.
  const mentions = Object.keys(env).filter((name) => name.startsWith(PREFIX) || nearMiss(name) !== null)
  if (mentions.length === 0) return { options, names }
  const known = knownVariables(modules)
  checkNames(known, mentions, modules)
  for (const [name, { module, key, expects }] of known) {
    const raw = env[name]
    if (raw === undefined) continue
    const value = parseValue(name, raw, expects)
    ;(names[module] ??= []).push(`${name}=${raw}`)
    if (key === null) {
      if (value === false) options[module] = false
      else if (options[module] !== false) options[module] ??= {}
    } else if (options[module] !== false) {
      options[module] ??= {}
      options[module][key] = value
    }
  }
  return { options, names }
}

function optionsFromEnv (modules, env = process.env) {
  return readEnv(modules, env).options
}

// A misspelt variable fails like a misspelt option: a near miss of a name
// install() reads (IO_HYGIENE_DNS_MAX_TTL for ..._MAX_TTL_MS), an option no
// variable can set (a function), and names within two edits of the prefix
// (IO_HYGEINE_DNS, io_hygiene_dns), which would otherwise be ignored
// silently. Any other IO_HYGIENE_* name is warned about once and ignored: a
// variable that only a newer version reads must not stop an older one
// (a rollback) from starting.
function checkNames (known, mentions, modules) {
  let unsettable = null
  for (const name of mentions) {
    if (name.startsWith(PREFIX)) {
      if (known.has(name) || RESERVED.some((prefix) => name.startsWith(prefix))) continue
      unsettable ??= optionVariables(modules)
      // An option no variable can carry (a logger, a client): say so, not
      // "did you mean" another variable.
      const option = unsettable.get(name)
      if (option !== undefined) throw new (errors().ERR_IO_HYGIENE_UNKNOWN_ENV)(name, null, option)
      const [best, d] = closest(name, known)
      if (d <= nearDistance(best)) throw new (errors().ERR_IO_HYGIENE_UNKNOWN_ENV)(name, best)
      warnUnknown(name)
      continue
    }
    throw new (errors().ERR_IO_HYGIENE_UNKNOWN_ENV)(name, closest(nearMiss(name), known)[0])
  }
}

// Two edits, or one per eight characters of the name meant: a dropped unit
// suffix (_MS) is a near miss of a long name.
function nearDistance (name) {
  return Math.max(2, Math.floor(name.length / 8))
}

// The variable name of every option no variable can set -> { module, key }.
function optionVariables (modules) {
  const names = new Map()
  for (const mod of modules) {
    const spec = mod.spec()
    for (const key of Object.keys(spec)) {
      if (!settable(spec[key].check.expects)) names.set(envName(mod.name, key), { module: mod.name, key })
    }
  }
  return names
}

const UNKNOWN_ENV = 'IO_HYGIENE_UNKNOWN_ENV'
// On globalThis: two loaded copies (register.js, then the app's own) warn once.
const kWarned = Symbol.for('io-hygiene.env.warned.v1')

function warnUnknown (name) {
  const warned = sharedSlot(kWarned, () => new Set())
  if (warned.has(name)) return
  warned.add(name)
  process.emitWarning(`${errors().printable(name)} is not a variable this version of io-hygiene reads; it is ignored ` +
    '(a variable of a newer version, or of another tool: rename it if it is neither)', { code: UNKNOWN_ENV, type: 'IoHygieneWarning' })
}

// The name with its prefix corrected, if its prefix is a near miss of ours.
function nearMiss (name) {
  if (!mayBeOurs(name)) return null
  const upper = name.toUpperCase()
  if (upper.startsWith(PREFIX)) return upper
  let best = null
  let bestDistance = 3
  for (let length = PREFIX.length - 2; length <= PREFIX.length + 2; length++) {
    const d = distance(upper.slice(0, length), PREFIX, 2)
    if (d < bestDistance) {
      best = PREFIX + upper.slice(length)
      bestDistance = d
    }
  }
  return best
}

// [the known name closest to `name`, its distance]
function closest (name, known) {
  let best = null
  let bestDistance = Infinity
  for (const candidate of known.keys()) {
    const d = distance(name, candidate)
    if (d < bestDistance) {
      best = candidate
      bestDistance = d
    }
  }
  return [best, bestDistance]
}

module.exports = { readEnv, optionsFromEnv, envName, knownVariables, distance, UNKNOWN_ENV }
