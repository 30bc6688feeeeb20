/** The JSON logger the processes install for the Temporal SDK (pure: lines captured in memory). */
import assert from 'node:assert/strict';
import { parseLevel, SdkJsonLogger } from '../control-plane/log';

describe('SDK log lines', () => {
  it('never carry an activity task token (nor the whole task), and keep the rest of the context', () => {
    const lines: string[] = [];
    const logger = new SdkJsonLogger('temporal', { level: 'debug', write: (l) => lines.push(l) });
    const token = 'CiQwMWEyMzRkMy05NWEzLTc4YjktYjJiNC1lMmJlYzJiMzUy';
    logger.error('Error while processing ActivityTask.start', {
      taskToken: token,
      task: JSON.stringify({ taskToken: token, activityId: '1' }),
      activityId: '1',
      activityType: 'runAssignment',
      workflowId: 'task/t-1',
      attempt: 1,
    });
    logger.info('activity heartbeat', { taskToken: token, activityId: '2' });
    assert.equal(lines.length, 2);
    for (const line of lines) assert.ok(!line.includes(token), line);
    const first = JSON.parse(lines[0]);
    assert.equal(first.level, 'error');
    assert.equal(first.activityType, 'runAssignment');
    assert.equal(first.taskId, 't-1');
    assert.equal('taskToken' in first, false);
    assert.equal('task' in first, false);
  });
});

describe('parseLevel', () => {
  it('takes the five levels in any case and falls back on anything else, inherited names included', () => {
    assert.equal(parseLevel('DEBUG'), 'debug');
    assert.equal(parseLevel('warn', 'error'), 'warn');
    assert.equal(parseLevel(undefined), 'info');
    assert.equal(parseLevel('verbose', 'warn'), 'warn');
    for (const raw of ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf']) {
      assert.equal(parseLevel(raw), 'info', raw);
    }
  });
});
