// tests/server/agent_sdk.test.mjs — an agent loop through the Vercel AI SDK (npm `ai` v6 with
// `@ai-sdk/openai-compatible` v2 and `zod` v4) on the trained demo model (runs/aah, imported by aah-convert), served
// as in agent.test.mjs (ChatML, --tool-call-parser hermes: Qwen3's template does not fit the model's 256 tokens).
// generateText's own tool loop: a forced call (tool_choice required, and a named tool) whose input the SDK parses
// with the tool's zod schema and passes to execute(), the result sent back as a tool turn, then an answer with
// tool_choice auto (prepareStep); the same through streamText. Every request's body is recorded by a fetch wrapper so
// that what went over the wire is checked too. Run by tests/test_agent_sdk.sh.
//
// The SDK has no parallel_tool_calls setting: an unknown key of providerOptions[<provider name>] goes into the body
// as it is, so { aahd: { parallel_tool_calls: false } } sends it (without it, under required, the grammar allows
// several calls and the demo model writes them until max_tokens).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, beforeEach, test } from 'node:test';

import { BUILD, startServer } from './lib.mjs';

const req = createRequire(path.resolve(process.env.AAH_OPENAI_DIR, 'package.json'));
const { generateText, streamText, tool, stepCountIs } = req('ai');
const { createOpenAICompatible } = req('@ai-sdk/openai-compatible');
const { z } = req('zod');

const MODEL = 'checkpoint-10000';
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'aahd-agent-sdk-'));
let srv, provider;
let sent = []; // the JSON bodies of the requests the SDK made, in order
let executed = []; // the inputs execute() was given

before(async () => {
  execFileSync(`${BUILD}/aah-convert`, ['import', '-q', 'runs/aah', path.join(tmp, 'aah')], { stdio: 'pipe' });
  srv = await startServer(['--chat-template', 'tests/data/chat/chatml.jinja', '--tool-call-parser', 'hermes'], {},
    path.join(tmp, 'aah', MODEL));
  const recording = async (url, init) => {
    assert.equal(new URL(url).pathname, '/v1/chat/completions');
    sent.push(JSON.parse(init.body));
    const r = await fetch(url, init);
    if (!r.ok) throw new Error(`aahd answered ${r.status} to ${init.body}: ${await r.text()}`);
    return r;
  };
  provider = createOpenAICompatible({ name: 'aahd', baseURL: `${srv.base}/v1`, apiKey: 'unused', fetch: recording,
    includeUsage: true });
});
beforeEach(() => {
  sent = [];
  executed = [];
});
after(async () => {
  if (srv) {
    const r = await srv.stop();
    assert.equal(r.code, 0, srv.log());
  }
  fs.rmSync(tmp, { recursive: true, force: true });
});

const digit = () => z.number().int().min(0).max(9);
const add = tool({
  description: 'Adds two digits',
  inputSchema: z.object({ a: digit(), b: digit() }).strict(),
  execute: async ({ a, b }) => {
    executed.push({ a, b });
    return String(a + b);
  },
});

// The SDK's settings of every test: the first step forced (toolChoice), the second (the answer) auto and short.
const settings = (toolChoice, extra = {}) => ({
  model: provider.chatModel(MODEL),
  tools: { add },
  toolChoice,
  stopWhen: stepCountIs(2),
  prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'auto', maxOutputTokens: 24 } : {}),
  prompt: 'What is 2 plus 3?',
  maxOutputTokens: 120,
  seed: 3,
  maxRetries: 0,
  providerOptions: { aahd: { parallel_tool_calls: false } },
  ...extra,
});

// An add input: the schema's two digits, nothing else.
function addInput(input) {
  assert.deepEqual(Object.keys(input).sort(), ['a', 'b'], JSON.stringify(input));
  for (const v of [input.a, input.b]) assert.ok(Number.isInteger(v) && v >= 0 && v <= 9, JSON.stringify(input));
  return input;
}

// Two add inputs alike. Compared with ===, not deepEqual's Object.is: the grammar lets the model write -0 for a digit
// (json_schema_shapes.c: -0 is 0, in range), which JSON.parse keeps as -0 and the SDK sends back as 0.
function sameInput(x, y) {
  assert.deepEqual(Object.keys(x).sort(), Object.keys(y).sort());
  for (const k of Object.keys(x)) assert.ok(x[k] === y[k], `${JSON.stringify(x)} vs ${JSON.stringify(y)}`);
}

// The two requests of a loop: the first forced as asked, the second carrying the call and its result back.
function checkWire(call, result, firstChoice) {
  assert.equal(sent.length, 2, JSON.stringify(sent));
  const [first, second] = sent;
  assert.deepEqual(first.tool_choice, firstChoice);
  assert.equal(first.parallel_tool_calls, false);
  assert.equal(first.tools.length, 1);
  assert.equal(first.tools[0].function.name, 'add');
  assert.deepEqual(first.tools[0].function.parameters.required, ['a', 'b']);
  assert.equal(second.tool_choice, 'auto');
  const [user, assistant, toolTurn] = second.messages;
  assert.deepEqual(user, first.messages[0]);
  assert.equal(assistant.role, 'assistant');
  assert.equal(assistant.tool_calls.length, 1);
  assert.equal(assistant.tool_calls[0].id, call.toolCallId);
  assert.equal(assistant.tool_calls[0].function.name, 'add');
  sameInput(JSON.parse(assistant.tool_calls[0].function.arguments), call.input);
  assert.deepEqual(toolTurn, { role: 'tool', tool_call_id: call.toolCallId, content: result });
  assert.equal(second.messages.length, 3);
}

// generateText's two steps: a call (tool-calls), its result, then an answer.
function checkSteps(r, firstChoice) {
  assert.equal(r.steps.length, 2, JSON.stringify(r.steps.map((s) => s.finishReason)));
  const [s0, s1] = r.steps;
  assert.equal(s0.finishReason, 'tool-calls');
  assert.equal(s0.toolCalls.length, 1, JSON.stringify(s0.toolCalls));
  const call = s0.toolCalls[0];
  assert.equal(call.toolName, 'add');
  assert.match(call.toolCallId, /^call_[A-Za-z0-9]{24}$/);
  assert.ok(!call.invalid, JSON.stringify(call));
  const { a, b } = addInput(call.input);
  assert.equal(executed.length, 1, 'execute() ran once');
  sameInput(executed[0], { a, b });
  assert.equal(s0.toolResults.length, 1);
  assert.equal(s0.toolResults[0].toolCallId, call.toolCallId);
  assert.equal(s0.toolResults[0].output, String(a + b));
  assert.ok(!s0.content.some((p) => p.type === 'tool-error'), JSON.stringify(s0.content));
  assert.ok(['stop', 'length'].includes(s1.finishReason), s1.finishReason);
  assert.equal(s1.toolCalls.length, 0);
  assert.equal(typeof r.text, 'string');
  assert.equal(r.text, s1.text);
  assert.ok(s1.usage.inputTokens > s0.usage.inputTokens, 'the call and its result are in the prompt');
  checkWire(call, String(a + b), firstChoice);
  return call;
}

test('generateText, toolChoice required: a call, its result as a tool turn, an answer', async () => {
  const r = await generateText(settings('required'));
  checkSteps(r, 'required');
  const roles = r.response.messages.map((m) => m.role);
  assert.deepEqual(roles, ['assistant', 'tool', 'assistant']);
});

test('generateText, toolChoice a named tool', async () => {
  const r = await generateText(settings({ type: 'tool', toolName: 'add' }));
  checkSteps(r, { type: 'function', function: { name: 'add' } });
});

test('streamText: the same loop streamed, the call equal to the whole one', async () => {
  const whole = await generateText(settings('required', { stopWhen: stepCountIs(1) }));
  assert.equal(whole.steps.length, 1);
  const wholeCall = whole.steps[0].toolCalls[0];
  sent = [];
  executed = [];

  const s = streamText(settings('required'));
  const kinds = [];
  let text = '';
  for await (const part of s.fullStream) {
    if (part.type === 'error') throw part.error;
    kinds.push(part.type);
    if (part.type === 'text-delta') text += part.text;
  }
  const steps = await s.steps;
  assert.equal(steps.length, 2);
  const call = checkSteps({ steps, text: await s.text }, 'required');
  assert.equal(text, await s.text, 'the deltas join to the text');
  assert.equal(sent[0].stream, true);
  assert.equal(sent[1].stream, true);
  assert.deepEqual(sent[0].stream_options, { include_usage: true });
  sameInput(call.input, wholeCall.input); // the streamed call is the whole one (seed 3)
  const at = (t) => kinds.indexOf(t);
  assert.ok(at('tool-call') >= 0 && at('tool-result') > at('tool-call'), kinds.join(' '));
  assert.equal(kinds.filter((k) => k === 'finish-step').length, 2, kinds.join(' '));
  assert.ok(kinds.lastIndexOf('finish-step') > at('tool-result'));
});
