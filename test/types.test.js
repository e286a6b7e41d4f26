'use strict'

// The types must work in a project that has neither optional peer: a strict
// tsc, no skipLibCheck, io-hygiene's index.d.ts installed in a folder where
// hot-shots and kafkajs cannot be found (TS2307 otherwise).
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFile } = require('node:child_process')

const root = path.join(__dirname, '..')
// tsd bundles a TypeScript compiler; it is a dev dependency, so it is there.
const tsc = path.join(path.dirname(require.resolve('@tsd/typescript/package.json')), 'typescript', 'lib', 'tsc.js')

function compile (dir) {
  return new Promise((resolve) => {
    execFile(process.execPath, [tsc, '-p', dir], { timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, output: stdout + stderr })
    })
  })
}

t.test('tsc --strict on a project with neither hot-shots nor kafkajs', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-types-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const pkg = path.join(dir, 'node_modules', 'io-hygiene')
  fs.mkdirSync(path.join(pkg, 'types'), { recursive: true })
  fs.copyFileSync(path.join(root, 'types', 'index.d.ts'), path.join(pkg, 'types', 'index.d.ts'))
  fs.writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'io-hygiene', types: 'types/index.d.ts' }))
  // npm installs io-hygiene's own dependencies beside it (undici's types are
  // part of the http API); only the optional peers are missing.
  for (const dep of Object.keys(require('../package.json').dependencies)) {
    fs.symlinkSync(path.join(root, 'node_modules', dep), path.join(dir, 'node_modules', dep), 'dir')
  }
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      module: 'commonjs',
      moduleResolution: 'node10',
      target: 'es2022',
      types: ['node'],
      typeRoots: [path.join(root, 'node_modules', '@types')],
    },
    files: ['app.ts'],
  }))
  fs.writeFileSync(path.join(dir, 'app.ts'), `
import { install, createStatsd, wrapProducer, type KafkaProducerLike } from 'io-hygiene'
install({ dns: { maxTtlMs: 60_000 } })
const statsd = createStatsd({ host: 'statsd.internal', prefix: 'api.' })
statsd.increment('requests', { route: '/users' })
declare const producer: KafkaProducerLike
wrapProducer(producer).send({ topic: 'events', messages: [{ key: 'k', value: 'v' }] })
`)
  t.notOk(fs.existsSync(path.join(dir, 'node_modules', 'hot-shots')), 'no hot-shots')
  const { code, output } = await compile(dir)
  t.equal(code, 0, output)
  t.notMatch(output, /TS2307/)
})
