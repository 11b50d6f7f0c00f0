'use strict'
// sdk.cjs drives warmpool's E2B front door with the E2B SDK, as an E2B user's code
// does: e2e/e2b_test.go runs it through scripts/e2b-sdk.sh against the built binary,
// with E2B_API_URL and E2B_SANDBOX_URL set to the front door and E2B_API_KEY to the
// gateway token, the template (a warmpool scope) as its argument. It prints one JSON
// line per step, which the test checks, and exits 1 at the first step that throws.
const { Sandbox } = require('e2b')

const template = process.argv[2]
const unknownTemplate = process.argv[3]

function out(step, fields) {
  console.log(JSON.stringify({ step, ...fields }))
}

// listAll reads every page of the list, limit at a time, as a caller of the
// paginator does.
async function listAll(opts) {
  const pages = []
  const paginator = Sandbox.list(opts)
  while (paginator.hasNext) {
    pages.push((await paginator.nextItems()).map((s) => s.sandboxId))
  }
  return pages
}

// refused runs f, which must throw: the error's class and message.
async function refused(f) {
  try {
    await f()
  } catch (err) {
    return { error: err.constructor.name, message: String(err.message), statusCode: err.statusCode }
  }
  throw new Error('the call did not fail')
}

async function main() {
  const sbx = await Sandbox.create(template, { timeoutMs: 60_000, metadata: { user: 'ann', run: 'e2e' } })
  out('create', { sandboxId: sbx.sandboxId })

  const info = await sbx.getInfo()
  out('getInfo', {
    sandboxId: info.sandboxId, templateId: info.templateId, state: info.state, metadata: info.metadata,
    startedAt: info.startedAt.toISOString(), endAt: info.endAt.toISOString(),
    cpuCount: info.cpuCount, memoryMB: info.memoryMB, envdVersion: info.envdVersion,
  })
  out('isRunning', { running: await sbx.isRunning() })

  const other = await Sandbox.create(template, { timeoutMs: 60_000, metadata: { user: 'bob' } })
  out('create', { sandboxId: other.sandboxId })
  out('list', { pages: await listAll({ limit: 1 }) })
  out('listAnn', { pages: await listAll({ query: { metadata: { user: 'ann' } } }) })

  await sbx.setTimeout(5_000)
  out('setTimeout', { endAt: (await sbx.getInfo()).endAt.toISOString() })

  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  out('connect', { sandboxId: again.sandboxId, endAt: (await again.getInfo()).endAt.toISOString() })

  out('kill', { killed: await again.kill() })
  out('killAgain', { killed: await Sandbox.kill(sbx.sandboxId) })
  out('isRunningAfterKill', { running: await sbx.isRunning() })
  out('getInfoAfterKill', await refused(() => Sandbox.getInfo(sbx.sandboxId)))
  out('connectAfterKill', await refused(() => Sandbox.connect(sbx.sandboxId)))
  out('listAfterKill', { pages: await listAll({}) })

  out('unknownTemplate', await refused(() => Sandbox.create(unknownTemplate)))
  out('wrongKey', await refused(() => Sandbox.create(template, { apiKey: 'not-the-key' })))
  out('envs', await refused(() => Sandbox.create(template, { envs: { A: '1' } })))
  out('pause', await refused(() => other.pause()))
  out('kill', { killed: await other.kill() })
}

main().then(
  () => out('done', {}),
  (err) => {
    out('failed', { error: err && err.constructor && err.constructor.name, message: String(err && err.stack) })
    process.exit(1)
  },
)

