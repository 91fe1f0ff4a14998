"""A real Jupyter kernel driven as a frontend drives it, for the tests (and benchmarks) that run code in one.

`Kernel` starts a kernel with jupyter_client, runs cells and reads every message they cause (printed text, errors,
widget comm updates), opens subshells and sends widget clicks, as JupyterLab does.
"""
import time

import jupyter_client


class Kernel:
    "A kernel and its client."
    def __init__(self, cwd, kernel_name: str = 'python3'):
        self.km = jupyter_client.KernelManager(kernel_name=kernel_name)
        self.km.start_kernel(cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)

    def __enter__(self): return self
    def __exit__(self, *exc): self.close()

    def interrupt(self):
        "What the ■ button does: SIGINT to the kernel."
        self.km.interrupt_kernel()

    def execute(self, code, timeout=120, on_output=None) -> tuple[str, str]:
        "Run `code` as a cell; return its status ('ok' or 'error') and the text it printed (tracebacks included)."
        status, out, _, _ = self._read(self.kc.execute(code), timeout, on_output=on_output)
        return status, out

    def run(self, code, timeout=120):
        "Run `code` (it must succeed); return the text it printed, and the comm updates meanwhile."
        out, updates, _ = self.collect(self.kc.execute(code), timeout)
        return out, updates

    def collect(self, msg_id, timeout, on_message=None, expect: str = 'ok'):
        "Read iopub until the request `msg_id` is idle (its status must be `expect`): its printed text, and every comm update with its time."
        status, out, updates, t = self._read(msg_id, timeout, on_message=on_message)
        assert status == expect, out
        return out, updates, t

    def _read(self, msg_id, timeout, on_message=None, on_output=None):
        out, comm_updates, deadline = [], [], time.time() + timeout
        while True:
            msg = self.kc.get_iopub_msg(timeout=max(deadline - time.time(), 0.1))
            kind, parent = msg['msg_type'], msg['parent_header'].get('msg_id')
            if on_message: on_message(msg)
            if kind == 'comm_msg': comm_updates.append((time.time(), msg['content']))
            if parent != msg_id: continue
            if kind == 'stream':
                out.append(msg['content']['text'])
                if on_output: on_output(''.join(out))
            elif kind == 'error': out.append('\n'.join(msg['content']['traceback']))
            elif kind == 'status' and msg['content']['execution_state'] == 'idle': break
        reply = self.kc.get_shell_msg(timeout=timeout)
        return reply['content']['status'], ''.join(out), comm_updates, time.time()

    def create_subshell(self) -> str:
        "Ask the kernel for a subshell, as JupyterLab does for widget comms."
        msg = self.kc.session.msg('create_subshell_request', {})
        self.kc.control_channel.send(msg)
        reply = self.kc.control_channel.get_msg(timeout=10)
        assert reply['content']['status'] == 'ok', reply['content']
        return reply['content']['subshell_id']

    def click(self, comm_id, subshell_id=None):
        "Send an ipywidgets button click, on `subshell_id` (None: the main shell)."
        msg = self.kc.session.msg('comm_msg', {'comm_id': comm_id,
                                               'data': {'method': 'custom', 'content': {'event': 'click'}}})
        if subshell_id is not None: msg['header']['subshell_id'] = subshell_id
        self.kc.shell_channel.send(msg)
