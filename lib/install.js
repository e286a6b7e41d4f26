'use strict'

const { resolve } = require('./options')
const { ERR_IO_HYGIENE_INVALID_OPTION, ERR_IO_HYGIENE_ALREADY_INSTALLED } = require('./errors')

// The modules install() applies, in this order. Each one has a spec (its
// options, validated before anything is touched) and an apply(cfg) that
// changes process state and returns { value, undo }.
const modules = [
  {
    name: 'dns',
    enabledByDefault: true,
    spec: () => require('./dns').spec,
    check: (cfg, where) => require('./dns').check(cfg, where),
    apply: (cfg) => require('./dns').installDns(cfg),
  },
]

const kState = Symbol.for('io-hygiene.install.v1')
const where = 'install()'

function validate (options) {
  if (options === undefined) options = {}
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new ERR_IO_HYGIENE_INVALID_OPTION(where, 'options', 'an object', options)
  }
  const spec = {}
  for (const mod of modules) {
    spec[mod.name] = { default: mod.enabledByDefault, check: moduleOptions(mod) }
  }
  const top = resolve(where, spec, options)
  const out = {}
  for (const mod of modules) {
    const value = top[mod.name]
    if (value === false) {
      out[mod.name] = false
      continue
    }
    const at = `install({ ${mod.name} })`
    out[mod.name] = resolve(at, mod.spec(), value === true ? {} : value)
    mod.check?.(out[mod.name], at)
  }
  return out
}

function moduleOptions (mod) {
  return (_, key, value) => {
    if (typeof value === 'boolean') return value
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'a boolean or an options object', value)
    }
    return value
  }
}

function install (options) {
  const resolved = validate(options)
  const current = globalThis[kState]
  if (current) {
    if (sameOptions(current.resolved, resolved)) return current.handle
    throw new ERR_IO_HYGIENE_ALREADY_INSTALLED()
  }

  const undos = []
  const handle = { uninstall }
  try {
    for (const mod of modules) {
      if (resolved[mod.name] === false) {
        handle[mod.name] = null
        continue
      }
      const { value, undo } = mod.apply(resolved[mod.name])
      undos.push(undo)
      handle[mod.name] = value
    }
  } catch (err) {
    for (const undo of undos.reverse()) undo()
    throw err
  }
  globalThis[kState] = { resolved, handle, undos }
  return handle
}

// Returns true when every patch was restored to the original; false when some
// other code wrapped a function after us (our wrapper then passes straight
// through to the original instead).
function uninstall () {
  const current = globalThis[kState]
  if (!current) return true
  delete globalThis[kState]
  let restored = true
  for (const undo of current.undos.reverse()) {
    if (undo() === false) restored = false
  }
  return restored
}

function installed () {
  return globalThis[kState]?.handle ?? null
}

function sameOptions (a, b) {
  for (const key of Object.keys(a)) {
    const x = a[key]
    const y = b[key]
    if (x === y) continue
    if (!x || !y) return false // one of them is off (false)
    for (const k of Object.keys(x)) {
      const u = x[k]
      const v = y[k]
      if (u === v) continue
      if (Array.isArray(u) && Array.isArray(v) && u.length === v.length && u.every((e, i) => e === v[i])) continue
      return false
    }
  }
  return true
}

module.exports = { install, uninstall, installed, modules }
