; KernelSwarm installer for Windows (NSIS 3, Modern UI 2).
;
; Built by `packaging/build.sh windows` on Windows (Git Bash / MSYS2), after PyInstaller made
; dist\kernelswarm\ there:
;   makensis -DVERSION=0.1.0 -DBUNDLE_DIR=<abs path to dist\kernelswarm> \
;            -DOUTFILE=<abs path of the setup .exe> [-DICON=<.ico>] kernelswarm.nsi
; Installs per machine into Program Files, adds Start menu and optional desktop shortcuts, an
; "Apps & features" entry with a clean uninstaller, and optionally puts kernelswarm.exe on PATH.

Unicode true
!include "MUI2.nsh"
!include "LogicLib.nsh"
!include "WinMessages.nsh"

!ifndef VERSION
  !error "pass -DVERSION=<version from pyproject.toml>"
!endif
!ifndef BUNDLE_DIR
  !error "pass -DBUNDLE_DIR=<PyInstaller's dist\kernelswarm folder>"
!endif
!ifndef OUTFILE
  !define OUTFILE "KernelSwarm-${VERSION}-windows-x64-setup.exe"
!endif

!define APP "KernelSwarm"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\${APP}"
!define ENV_KEY "SYSTEM\CurrentControlSet\Control\Session Manager\Environment"

Name "${APP} ${VERSION}"
OutFile "${OUTFILE}"
InstallDir "$PROGRAMFILES64\${APP}"
InstallDirRegKey HKLM "Software\${APP}" "InstallDir"
RequestExecutionLevel admin
SetCompressor /SOLID lzma
ManifestDPIAware true
; Windows wants a four-part numeric version here
VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APP}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APP} installer"
VIAddVersionKey "LegalCopyright" "KernelSwarm team, MIT licence"

!define MUI_ABORTWARNING
!ifdef ICON
  !define MUI_ICON "${ICON}"
  !define MUI_UNICON "${ICON}"
!endif
!define MUI_FINISHPAGE_RUN "$INSTDIR\kernelswarm-gui.exe"
!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_COMPONENTS
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Section "KernelSwarm (required)" SecApp
  SectionIn RO
  SetOutPath "$INSTDIR"
  File /r "${BUNDLE_DIR}\*.*"
  WriteUninstaller "$INSTDIR\uninstall.exe"
  WriteRegStr HKLM "Software\${APP}" "InstallDir" "$INSTDIR"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayName" "${APP}"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "Publisher" "KernelSwarm team"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\kernelswarm-gui.exe"
  WriteRegStr HKLM "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\uninstall.exe"'
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKLM "${UNINSTALL_KEY}" "NoRepair" 1
  CreateDirectory "$SMPROGRAMS\${APP}"
  CreateShortcut "$SMPROGRAMS\${APP}\${APP}.lnk" "$INSTDIR\kernelswarm-gui.exe"
  CreateShortcut "$SMPROGRAMS\${APP}\Uninstall ${APP}.lnk" "$INSTDIR\uninstall.exe"
SectionEnd

Section "Desktop shortcut" SecDesktop
  CreateShortcut "$DESKTOP\${APP}.lnk" "$INSTDIR\kernelswarm-gui.exe"
SectionEnd

Section "Add kernelswarm to PATH (command line)" SecPath
  ReadRegStr $0 HKLM "${ENV_KEY}" "Path"
  WriteRegExpandStr HKLM "${ENV_KEY}" "Path" "$0;$INSTDIR"
  WriteRegStr HKLM "Software\${APP}" "AddedToPath" "1"
  SendMessage ${HWND_BROADCAST} ${WM_SETTINGCHANGE} 0 "STR:Environment" /TIMEOUT=5000
SectionEnd

Section "Uninstall"
  ; the bundle only: the user's history database and settings stay (like every Windows app)
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\kernelswarm.exe"
  Delete "$INSTDIR\kernelswarm-gui.exe"
  Delete "$INSTDIR\uninstall.exe"
  RMDir "$INSTDIR"
  Delete "$SMPROGRAMS\${APP}\${APP}.lnk"
  Delete "$SMPROGRAMS\${APP}\Uninstall ${APP}.lnk"
  RMDir "$SMPROGRAMS\${APP}"
  Delete "$DESKTOP\${APP}.lnk"
  ReadRegStr $1 HKLM "Software\${APP}" "AddedToPath"
  ${If} $1 == "1"
    ; remove ";<instdir>" from the machine PATH
    ReadRegStr $0 HKLM "${ENV_KEY}" "Path"
    Push $0
    Push ";$INSTDIR"
    Call un.RemoveFromString
    Pop $0
    WriteRegExpandStr HKLM "${ENV_KEY}" "Path" "$0"
    SendMessage ${HWND_BROADCAST} ${WM_SETTINGCHANGE} 0 "STR:Environment" /TIMEOUT=5000
  ${EndIf}
  DeleteRegKey HKLM "${UNINSTALL_KEY}"
  DeleteRegKey HKLM "Software\${APP}"
SectionEnd

; string, needle -> string without the first occurrence of needle
Function un.RemoveFromString
  Exch $R1 ; needle
  Exch
  Exch $R0 ; haystack
  Push $R2
  Push $R3
  Push $R4
  Push $R5
  StrLen $R3 $R1
  StrCpy $R2 0
  loop:
    StrCpy $R4 $R0 $R3 $R2
    StrCmp $R4 "" done
    StrCmp $R4 $R1 found
    IntOp $R2 $R2 + 1
    Goto loop
  found:
    StrCpy $R4 $R0 $R2
    IntOp $R5 $R2 + $R3
    StrCpy $R5 $R0 "" $R5
    StrCpy $R0 "$R4$R5"
  done:
  Pop $R5
  Pop $R4
  Pop $R3
  Pop $R2
  Pop $R1
  Exch $R0
FunctionEnd

!insertmacro MUI_FUNCTION_DESCRIPTION_BEGIN
  !insertmacro MUI_DESCRIPTION_TEXT ${SecApp} "The application, command line and GUI."
  !insertmacro MUI_DESCRIPTION_TEXT ${SecDesktop} "A desktop shortcut to the GUI."
  !insertmacro MUI_DESCRIPTION_TEXT ${SecPath} "Run kernelswarm from any terminal."
!insertmacro MUI_FUNCTION_DESCRIPTION_END
