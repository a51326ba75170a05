#!/usr/bin/env python3
"""Records what the pinned Claude ACP adapter says, for tests/it/fixtures/acp/ and for keeping
the fake ACP agent (tests/fakes/fake_acp.rs) true to it when the pinned version changes.

Runs the adapter (AGENTMUX_TEST_ACP_NODE, AGENTMUX_TEST_ACP_ADAPTER) driving the Claude CLI
(AGENTMUX_TEST_CLAUDE_BIN) against the fake Messages API (target/debug/fake-anthropic), all
offline, and writes every line it sends (`->`) and receives (`<-`) to OUT:

    . scripts/deps.sh; ensure_claude_cli; ensure_acp_adapter
    cargo build -p agentmux-fakes
    python3 scripts/record_acp.py OUT            # turns, tool calls, cancel, resume, load
    python3 scripts/record_acp.py --permissions OUT   # the same in the `default` mode: prompts
    python3 scripts/record_acp.py --methods OUT       # unknown methods, modes and their updates

Replace the temporary working directory in OUT with /workspace before committing it.
"""
import json, os, queue, subprocess, sys, tempfile, threading, time

PERMISSIONS = '--permissions' in sys.argv[1:]
METHODS = '--methods' in sys.argv[1:]
OUT = [a for a in sys.argv[1:] if not a.startswith('--')][0]
NODE = os.environ['AGENTMUX_TEST_ACP_NODE']
AD = os.environ['AGENTMUX_TEST_ACP_ADAPTER']
CL = os.environ['AGENTMUX_TEST_CLAUDE_BIN']
tmp = tempfile.mkdtemp()
api = subprocess.Popen([os.path.join('target', 'debug', 'fake-anthropic'), '--port', '0'],
                       stdout=subprocess.PIPE, text=True)
url = api.stdout.readline().strip().split(' ')[-1]
home = os.path.join(tmp, 'home'); os.makedirs(home)
cwd = os.path.join(tmp, 'ws'); os.makedirs(cwd)
env={'PATH':os.environ['PATH'],'HOME':home,'ANTHROPIC_BASE_URL':url,'ANTHROPIC_API_KEY':'dummy','CLAUDE_CODE_EXECUTABLE':CL,'CLAUDE_CONFIG_DIR':home+'/.claude','IS_SANDBOX':'1','CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC':'1','CLAUDE_CODE_MAX_RETRIES':'0'}
log=open(OUT,'w')
def start():
    p=subprocess.Popen([NODE,AD],stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL,text=True,cwd=cwd,env=env)
    q=queue.Queue()
    def rd():
        for line in p.stdout:
            log.write('<- '+line); log.flush(); q.put(json.loads(line))
        q.put(None)
    threading.Thread(target=rd,daemon=True).start()
    return p,q
nid=[0]
def send(p,obj):
    s=json.dumps(obj); log.write('-> '+s+'\n'); log.flush(); p.stdin.write(s+'\n'); p.stdin.flush()
def req(p,q,method,params,on=None,timeout=90):
    nid[0]+=1; i=nid[0]; send(p,{'jsonrpc':'2.0','id':i,'method':method,'params':params})
    end=time.time()+timeout
    while time.time()<end:
        try: m=q.get(timeout=1)
        except queue.Empty: continue
        if m is None: return None
        if m.get('id')==i and 'method' not in m: return m
        if on: on(p,m)
    raise Exception('timeout '+method)
def perm(answer):
    def on(p,m):
        if m.get('method')=='session/request_permission':
            opts=m['params']['options']
            kind={'allow':'allow_once','deny':'reject_once'}[answer]
            oid=[o['optionId'] for o in opts if o['kind']==kind][0]
            send(p,{'jsonrpc':'2.0','id':m['id'],'result':{'outcome':{'outcome':'selected','optionId':oid}}})
    return on
p,q=start()
init=req(p,q,'initialize',{'protocolVersion':1,'clientCapabilities':{'fs':{'readTextFile':False,'writeTextFile':False},'terminal':False}})
new=req(p,q,'session/new',{'cwd':cwd,'mcpServers':[]})
sid=new['result']['sessionId']
if METHODS:
    req(p,q,'no/such_method',{})
    send(p,{'jsonrpc':'2.0','method':'no/such_notification','params':{}})
    req(p,q,'session/no_such_method',{'sessionId':sid})
    req(p,q,'session/set_mode',{'sessionId':sid,'modeId':'no-such-mode'})
    req(p,q,'session/set_mode',{'sessionId':sid,'modeId':'bypassPermissions'})
    req(p,q,'session/set_config_option',{'sessionId':sid,'configId':'mode','value':'plan'})
    req(p,q,'session/set_mode',{'sessionId':sid,'modeId':'default'})
    p.stdin.close(); p.wait(timeout=20); api.kill(); sys.exit(0)
if PERMISSIONS:
    req(p,q,'session/set_mode',{'sessionId':sid,'modeId':'default'})
else:
    req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'hello one'}]})
req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'TOOL:touch+a.txt'}]},on=perm('allow'))
req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'TOOL:touch+b.txt'}]},on=perm('deny'))
# cancel during slow
def cancel_later():
    time.sleep(3); send(p,{'jsonrpc':'2.0','method':'session/cancel','params':{'sessionId':sid}})
threading.Thread(target=cancel_later).start()
t=time.time(); req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'SLOW please'}]}); log.write('## cancel took %.1f\n'%(time.time()-t))
# cancel while permission pending
def on_perm_cancel(p2,m):
    if m.get('method')=='session/request_permission':
        log.write('## permission pending; cancelling\n')
        send(p,{'jsonrpc':'2.0','method':'session/cancel','params':{'sessionId':sid}})
        send(p,{'jsonrpc':'2.0','id':m['id'],'result':{'outcome':{'outcome':'cancelled'}}})
req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'TOOL:touch+c.txt'}]},on=on_perm_cancel)
if PERMISSIONS:
    p.stdin.close(); p.wait(timeout=20); api.kill(); sys.exit(0)
req(p,q,'session/set_mode',{'sessionId':sid,'modeId':'acceptEdits'})
req(p,q,'session/set_config_option',{'sessionId':sid,'configId':'model','value':'default'})
p.stdin.close(); p.wait(timeout=20)
log.write('## restart\n')
p,q=start()
req(p,q,'initialize',{'protocolVersion':1,'clientCapabilities':{'fs':{'readTextFile':False,'writeTextFile':False},'terminal':False}})
r=req(p,q,'session/resume',{'sessionId':sid,'cwd':cwd,'mcpServers':[]})
req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'after resume'}]})
p.stdin.close(); p.wait(timeout=20)
log.write('## load\n')
p,q=start()
req(p,q,'initialize',{'protocolVersion':1,'clientCapabilities':{'fs':{'readTextFile':False,'writeTextFile':False},'terminal':False}})
r=req(p,q,'session/load',{'sessionId':sid,'cwd':cwd,'mcpServers':[]})
req(p,q,'session/resume',{'sessionId':'00000000-0000-4000-8000-000000000000','cwd':cwd,'mcpServers':[]})
req(p,q,'session/prompt',{'sessionId':sid,'prompt':[{'type':'text','text':'after load'}]})
p.stdin.close(); p.wait(timeout=20)
api.kill()
