'use strict'

const { ERR_IO_HYGIENE_INVALID_ENV } = require('./errors')

// install() options from IO_HYGIENE_* environment variables, for
// `node -r io-hygiene/register`. IO_HYGIENE_<MODULE>=0 turns a module off;
// IO_HYGIENE_<MODULE>_<OPTION> sets an option (maxTtlMs -> MAX_TTL_MS).
// Values are parsed by the option's type; install() then validates them as
// it validates code, so a bad value fails the same way.
function envName (moduleName, key) {
  const snake = key.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toUpperCase()
  return `IO_HYGIENE_${moduleName.toUpperCase()}_${snake}`
}

function parseValue (name, raw, expects) {
  if (expects.startsWith('integer')) {
    if (!/^\d+$/.test(raw)) throw new ERR_IO_HYGIENE_INVALID_ENV(name, 'a whole number', raw)
    return Number(raw)
  }
  if (expects.startsWith('boolean')) {
    if (raw === '1' || raw === 'true') return true
    if (raw === '0' || raw === 'false') return false
    throw new ERR_IO_HYGIENE_INVALID_ENV(name, '1, 0, true or false', raw)
  }
  if (expects.startsWith('string[]')) {
    if (expects.endsWith('| null') && raw === '') return null
    return raw.split(',').map((s) => s.trim()).filter(Boolean)
  }
  if (expects.endsWith('| null') && raw === '') return null
  return raw
}

function optionsFromEnv (modules, env = process.env) {
  const options = {}
  for (const mod of modules) {
    const flag = env[`IO_HYGIENE_${mod.name.toUpperCase()}`]
    if (flag !== undefined) {
      const on = parseValue(`IO_HYGIENE_${mod.name.toUpperCase()}`, flag, 'boolean')
      if (!on) {
        options[mod.name] = false
        continue
      }
      options[mod.name] = {}
    }
    const spec = mod.spec()
    for (const key of Object.keys(spec)) {
      const name = envName(mod.name, key)
      const raw = env[name]
      if (raw === undefined || !spec[key].check.expects) continue
      options[mod.name] ??= {}
      options[mod.name][key] = parseValue(name, raw, spec[key].check.expects)
    }
  }
  return options
}

module.exports = { optionsFromEnv, envName }
