'use strict'

// On every Node line CI runs (20 and 22 bundle undici 6, 24 undici 7, 26
// undici 8), each reader of undici's global dispatcher goes through ours
// after install(), and around it again after uninstall(). Counts requests, so
// that a global-dispatcher slot a later Node or undici reads fails here.
const t = require('tap')
const { execFile } = require('node:child_process')
const path = require('node:path')
const { withWarnings } = require('./helpers/with-warnings')

const fixture = path.join(__dirname, 'fixtures', 'http-readers.js')
const run = (order, name) => new Promise((resolve, reject) => {
  execFile(process.execPath, [fixture, order, name], { env: withWarnings() }, (err, stdout, stderr) => {
    if (err) return reject(Object.assign(err, { stderr }))
    resolve({ out: JSON.parse(stdout), stderr })
  })
})

const each = { globalFetch: 1, undiciFetch: 1, undiciRequest: 1 }
const none = { globalFetch: 0, undiciFetch: 0, undiciRequest: 0 }

for (const name of ['undici', 'undici7']) {
  for (const order of ['before', 'after']) {
    t.test(`Node ${process.versions.node}: fetch, ${name}.fetch and ${name}.request, ${name} loaded ${order} install()`, async (t) => {
      const { out, stderr } = await run(order, name)
      t.same(out, { counted: each, global: true, restored: true, afterUninstall: none })
      t.notMatch(stderr, /IO_HYGIENE_HTTP_NOT_GLOBAL/, 'no warning: it is global')
    })
  }
}
