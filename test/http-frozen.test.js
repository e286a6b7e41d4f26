'use strict'

// A frozen globalThis (hardened runtimes, undici's own
// test/global-frozen.js): requests keep working, in either order, through
// ours when a copy of undici read its slot before the freeze, and through
// undici's own when none did, as undici 8 keeps its dispatcher aside then.
const t = require('tap')
const path = require('node:path')
const { execFile } = require('node:child_process')
const { withWarnings } = require('./helpers/with-warnings')

const fixture = path.join(__dirname, 'fixtures', 'http-frozen.js')
const run = (mode, file = fixture, args = []) => new Promise((resolve, reject) => {
  execFile(process.execPath, [...args, file, mode], { env: withWarnings() }, (err, stdout, stderr) => {
    if (err) return reject(new Error(`${mode}: ${err.message} ${stderr}`))
    resolve(JSON.parse(stdout))
  })
})

// Node 26's fetch is undici 8, which reads the slot that undici 8 keeps
// aside on a frozen globalThis; Node 22's and 24's read the legacy one.
const node26 = Number(process.versions.node.split('.')[0]) >= 26

t.test('install() then a freeze: requests go through ours where undici read its slot before the freeze', async (t) => {
  t.same(await run('install-then-freeze'), {
    answers: 'ok ok', requests: node26 ? 0 : 1, global: false, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'],
  }, 'no undici read it before the freeze: undici 8 keeps its own aside, Node 22\'s and 24\'s fetch get ours')
  t.same(await run('undici-install-freeze'), { answers: 'ok ok', requests: 2, global: true, warnings: [] }, 'undici loaded before install()')
})

t.test('undici 8\'s dispatcher set on a frozen globalThis is the one it returns, preloaded as plain', async (t) => {
  const fallback = path.join(__dirname, 'fixtures', 'http-frozen-fallback.js')
  const plain = await run('', fallback)
  t.same(plain, { first: true, setA: 'ok', getsA: true, setB: 'ok', getsB: true })
  t.same(await run('', fallback, ['--require', path.join(__dirname, '..', 'register.js')]), plain)
})

t.test('a freeze, then install(): undici\'s own dispatcher keeps working, and the warning says so', async (t) => {
  const notOurs = { answers: 'ok ok', requests: 0, global: false, restored: false, afterUninstall: 'ok ok', requestsAfter: 0, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'] }
  t.same(await run('undici-freeze-then-install'), notOurs, 'undici\'s slots were set before the freeze')
  // Node 22's and 24's own undici throws when it loads on a frozen globalThis.
  if (Number(process.versions.node.split('.')[0]) >= 26) {
    t.same(await run('freeze-then-install'), notOurs, 'no slot before the freeze: undici keeps its dispatcher aside')
  }
})

t.test('undo after a freeze: theirs is served again where it can be; where it cannot, ours stays open', async (t) => {
  t.same(await run('http-install-freeze'), {
    answers: 'ok ok', requests: node26 ? 0 : 1, global: false, restored: false, afterUninstall: 'ok ok', requestsAfter: 0, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'],
  }, 'our getter, which the freeze kept, serves the previous dispatcher')
  t.same(await run('http-freeze-unused'), { restored: true, global: true, warnings: [] }, 'never used: the getters a freeze kept stay, and would still make ours at first use')
  // Loading undici 7 loads Node 26's own undici too (a fetch global it
  // touches), which reads the current slot before the freeze.
  t.same(await run('http-undici7-freeze'), node26
    ? { answers: 'ok ok', requests: 2, global: true, restored: true, afterUninstall: 'ok ok', requestsAfter: 0, warnings: [] }
    : { answers: 'ok ok', requests: 1, global: false, restored: false, afterUninstall: 'ok ok', requestsAfter: 0, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'] },
  'undici read the slots before the freeze: the getters the freeze kept serve undici\'s default again')
  t.same(await run('undici-http-install-freeze'), {
    answers: 'ok ok', requests: 2, global: true, restored: false, afterUninstall: 'ok ok', requestsAfter: 2, warnings: [],
  }, 'a frozen slot keeps ours: undo says false and leaves it working')
})

t.test('install() as a whole on a frozen globalThis: it installs, serves, uninstalls and installs again', async (t) => {
  const after = await run('install-all-then-freeze')
  t.same(after, { answers: 'ok ok', lookup: '127.0.0.1', cached: 1, uninstalled: true, again: true, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'] }, 'frozen after install(): the second install() can no longer take the slot, and says so')
  if (Number(process.versions.node.split('.')[0]) >= 26) {
    const before = await run('freeze-then-install-all')
    t.same(before, { answers: 'ok ok', lookup: '127.0.0.1', cached: 1, uninstalled: true, again: true, warnings: ['IO_HYGIENE_HTTP_NOT_GLOBAL'] }, 'frozen before install()')
  }
})
